// Tokens of the words seen so far in one encode() call. A word's tokens
// depend on its bytes only (BPE words; SentencePiece words when they are
// independent) and prose repeats words, so long texts mostly hit. Keys view
// the caller's text, so a cache lives no longer than one call.
#pragma once

#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kvlm {

class WordCache {
 public:
  static constexpr size_t kMaxWordBytes = 32;     // longer words are not cached
  static constexpr size_t kMaxEntries = 1 << 16;  // then the cache starts over

  // Appends the cached tokens of `word` to `out`; false if it is not cached.
  bool append(std::string_view word, std::vector<int32_t>& out) const {
    auto it = entries_.find(word);
    if (it == entries_.end()) return false;
    out.insert(out.end(), tokens_.begin() + it->second.first, tokens_.begin() + it->second.second);
    return true;
  }

  // Remembers out[first, end) as the tokens of `word`.
  void remember(std::string_view word, const std::vector<int32_t>& out, size_t first) {
    if (entries_.size() >= kMaxEntries) {
      entries_.clear();
      tokens_.clear();
    }
    const auto begin = static_cast<uint32_t>(tokens_.size());
    tokens_.insert(tokens_.end(), out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
    entries_.emplace(word, std::make_pair(begin, static_cast<uint32_t>(tokens_.size())));
  }

  // Encodes `word` with `encode(word, out)` unless it is cached.
  template <typename Encode>
  void encode(std::string_view word, std::vector<int32_t>& out, Encode&& encode_fn) {
    if (word.size() > kMaxWordBytes) {
      encode_fn(word, out);
    } else if (!append(word, out)) {
      const size_t first = out.size();
      encode_fn(word, out);
      remember(word, out, first);
    }
  }

 private:
  std::unordered_map<std::string_view, std::pair<uint32_t, uint32_t>> entries_;
  std::vector<int32_t> tokens_;
};

}  // namespace kvlm
