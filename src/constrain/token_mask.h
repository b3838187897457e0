// Which tokens may come next under a grammar: a byte trie over the
// vocabulary's token strings, built once per vocabulary, walked from a
// matcher's threads. Tokens that share a prefix share the walk, and a byte
// the grammar rejects prunes every token below it, so a step costs the part
// of the trie the grammar allows, not vocab x token length.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "constrain/matcher.h"

namespace kvlm {
class Tokenizer;
}

namespace kvlm::constrain {

class TokenIndex {
 public:
  // pieces[i]: the bytes token i stands for; usable[i] false: never allowed by
  // a grammar (control and unused tokens); end_tokens: end-of-generation ids,
  // allowed exactly where the grammar is complete.
  TokenIndex(const std::vector<std::string>& pieces, const std::vector<bool>& usable, std::vector<int32_t> end_tokens);
  // The tokenizer's pieces; control, unknown and unused tokens excluded.
  static std::shared_ptr<const TokenIndex> from_tokenizer(const Tokenizer& tokenizer);

  int32_t vocab_size() const { return vocab_size_; }
  int32_t num_trie_nodes() const { return static_cast<int32_t>(nodes_.size()); }
  const std::vector<int32_t>& end_tokens() const { return end_tokens_; }

  // allowed[i] = 1 if token i may come next, else 0 (resized to the vocab).
  // Returns the number of allowed tokens. The matcher's position is not
  // changed; its caches (stack frames, the lazy DFA) grow.
  int32_t fill_mask(Matcher& matcher, std::vector<uint8_t>& allowed) const;

 private:
  struct Node {
    int32_t first_child = 0;  // children are contiguous, sorted by byte
    int32_t num_children = 0;
    int32_t first_token = 0;  // tokens_[first_token, +num_tokens) end here
    int32_t num_tokens = 0;
    uint8_t byte = 0;         // the edge from the parent
  };
  void walk(Matcher& m, int32_t node, int32_t set, std::vector<uint8_t>& allowed, int32_t& count) const;

  int32_t vocab_size_ = 0;
  std::vector<Node> nodes_;  // nodes_[0]: the root (the empty string)
  std::vector<int32_t> tokens_;
  std::vector<int32_t> end_tokens_;
};

}  // namespace kvlm::constrain
