// Byte-level BPE (tokenizer.ggml.model == "gpt2") with llama.cpp's
// llm_tokenizer_bpe semantics: split the text into words with the
// pre-tokenizer, map each word's bytes to GPT-2's printable code points, then
// repeatedly merge the adjacent pair with the lowest merge rank (ties: the
// leftmost pair) and emit each symbol's token.
//
// Merges are keyed by the ids of their two parts (one 64-bit hash lookup per
// candidate pair), built once at load; each word is merged with a priority
// queue, O(n log n) in its length.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/vocab.h"

namespace kvlm {

class BpeTokenizer {
 public:
  // `vocab` must outlive the tokenizer. Compiles the pre-tokenizer of
  // vocab.pre_type() and indexes vocab.merges().
  explicit BpeTokenizer(const Vocab& vocab);

  // Appends the tokens of `text` (raw text without special tokens; any bytes,
  // invalid UTF-8 handled as llama.cpp does) to `out`. Thread-safe.
  void encode(std::string_view text, std::vector<int32_t>& out) const;

  size_t num_merges() const { return num_merges_by_id_ + merges_by_text_.size(); }

 private:
  struct Merge {
    int32_t rank;
    int32_t result;  // token of the merged text; -1 if the vocabulary lacks it
  };
  struct Scratch;
  void encode_word(std::string_view word, Scratch& scratch, std::vector<int32_t>& out) const;
  const Merge* find_merge(int32_t left_id, int32_t right_id, std::string_view left_text,
                          std::string_view right_text) const;

  // (left id << 32 | right id) -> merge: open addressing, linear probing,
  // load factor <= 1/2; built once, read-only afterwards.
  struct MergeSlot {
    uint64_t key = kEmptyKey;
    Merge merge{};
  };
  static constexpr uint64_t kEmptyKey = ~uint64_t{0};
  void insert_merge(uint64_t key, Merge merge);
  const Merge* find_merge_by_id(uint64_t key) const;

  const Vocab& vocab_;
  PreTokenizer pre_tokenizer_;
  std::vector<MergeSlot> merges_by_id_;
  uint64_t merge_mask_ = 0;
  size_t num_merges_by_id_ = 0;
  // Merges with a part that is no token (rare, malformed vocabularies); the
  // key is the two encoded texts, length-prefixed.
  std::unordered_map<std::string, Merge> merges_by_text_;
  std::array<int32_t, 256> byte_symbol_token_{};  // token of byte b's GPT-2 code point, -1 if none
  std::array<int32_t, 256> raw_byte_token_{};     // token whose text is the single byte b, -1 if none
};

}  // namespace kvlm
