#include "constrain/token_mask.h"

#include <algorithm>
#include <map>

#include "tokenizer/tokenizer.h"

namespace kvlm::constrain {

TokenIndex::TokenIndex(const std::vector<std::string>& pieces, const std::vector<bool>& usable,
                       std::vector<int32_t> end_tokens)
    : vocab_size_(static_cast<int32_t>(pieces.size())), end_tokens_(std::move(end_tokens)) {
  // A pointer trie first, then flattened breadth-first so each node's
  // children sit side by side.
  struct Tmp {
    std::map<uint8_t, int32_t> children;
    std::vector<int32_t> tokens;
  };
  std::vector<Tmp> tmp(1);
  for (int32_t id = 0; id < vocab_size_; ++id) {
    if (!usable[id] || pieces[id].empty()) continue;
    if (std::find(end_tokens_.begin(), end_tokens_.end(), id) != end_tokens_.end()) continue;
    int32_t at = 0;
    for (char c : pieces[id]) {
      const auto b = static_cast<uint8_t>(c);
      auto it = tmp[at].children.find(b);
      if (it == tmp[at].children.end()) {
        tmp.emplace_back();
        it = tmp[at].children.emplace(b, static_cast<int32_t>(tmp.size() - 1)).first;
      }
      at = it->second;
    }
    tmp[at].tokens.push_back(id);
  }
  std::vector<int32_t> order{0};  // breadth-first order of tmp ids
  nodes_.resize(tmp.size());
  for (size_t i = 0; i < order.size(); ++i) {
    const Tmp& t = tmp[order[i]];
    Node& n = nodes_[i];
    n.first_child = static_cast<int32_t>(order.size());
    n.num_children = static_cast<int32_t>(t.children.size());
    n.first_token = static_cast<int32_t>(tokens_.size());
    n.num_tokens = static_cast<int32_t>(t.tokens.size());
    tokens_.insert(tokens_.end(), t.tokens.begin(), t.tokens.end());
    for (const auto& [b, child] : t.children) {
      nodes_[order.size()].byte = b;
      order.push_back(child);
    }
  }
}

std::shared_ptr<const TokenIndex> TokenIndex::from_tokenizer(const Tokenizer& tok) {
  const int32_t n = tok.vocab_size();
  std::vector<std::string> pieces(n);
  std::vector<bool> usable(n);
  std::vector<int32_t> ends;
  constexpr uint32_t kSkip = token_attr::kControl | token_attr::kUnknown | token_attr::kUnused;
  for (int32_t id = 0; id < n; ++id) {
    pieces[id] = tok.piece(id);
    usable[id] = !tok.vocab().has_attr(id, kSkip);
    if (tok.is_end_of_generation(id)) ends.push_back(id);
  }
  return std::make_shared<const TokenIndex>(pieces, usable, std::move(ends));
}

void TokenIndex::walk(Matcher& m, int32_t node, int32_t set, std::vector<uint8_t>& allowed, int32_t& count) const {
  const Node& parent = nodes_[node];
  for (int32_t c = parent.first_child; c < parent.first_child + parent.num_children; ++c) {
    const Node& child = nodes_[c];
    const int32_t next = m.next_set(set, child.byte);
    if (next < 0) continue;
    for (int32_t i = child.first_token; i < child.first_token + child.num_tokens; ++i) {
      allowed[tokens_[i]] = 1;
      ++count;
    }
    if (child.num_children > 0) walk(m, c, next, allowed, count);
  }
}

int32_t TokenIndex::fill_mask(Matcher& m, std::vector<uint8_t>& allowed) const {
  allowed.assign(static_cast<size_t>(vocab_size_), 0);
  int32_t count = 0;
  m.reset_cache_if_large();
  walk(m, 0, m.current_set(), allowed, count);
  if (m.accepting())
    for (int32_t e : end_tokens_) {
      allowed[e] = 1;
      ++count;
    }
  return count;
}

}  // namespace kvlm::constrain
