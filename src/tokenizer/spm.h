// SentencePiece-style tokenization over a vocabulary with scores
// (tokenizer.ggml.model == "llama"), with llama.cpp's llm_tokenizer_spm
// semantics: start from one symbol per UTF-8 character, repeatedly merge the
// adjacent pair whose concatenation is the highest-scoring token (ties: the
// leftmost pair), then emit each symbol's token, or its bytes as <0xNN>
// tokens when the symbol is not a token. O(n log n) in the text length; for
// the usual vocabularies (U+2581 only ever leads a token) each word is merged
// on its own, which gives the same result with small, cache-resident heaps.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace kvlm {

class SpmTokenizer {
 public:
  // `vocab` must outlive the tokenizer.
  explicit SpmTokenizer(const Vocab& vocab);

  // Appends the tokens of `text` to `out`. `text` is already in SentencePiece
  // form: spaces escaped as U+2581 and the space prefix added by the caller.
  // A byte with no <0xNN> token becomes the unknown token; with neither,
  // Error(kUnsupported) is thrown.
  void encode(std::string_view text, std::vector<int32_t>& out) const;

 private:
  struct Scratch;
  // The merge loop over one independent piece of text.
  void merge(std::string_view text, Scratch& scratch, std::vector<int32_t>& out) const;
  void append_bytes(std::string_view bytes, std::vector<int32_t>& out) const;

  const Vocab& vocab_;
  std::array<int32_t, 256> byte_tokens_{};  // <0xNN> (or the raw byte) token; -1 if none
  // No token has U+2581 after other text: words can be merged one at a time.
  bool words_are_independent_ = false;
};

}  // namespace kvlm
