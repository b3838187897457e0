// Splitting text on special tokens before tokenization, as llama.cpp's
// tokenizer_st_partition does: special tokens are taken longest first (see
// Vocab::special_tokens_by_length); each one splits every remaining text
// fragment at all its non-overlapping occurrences, left to right. A token with
// the LSTRIP (RSTRIP) attribute swallows the whitespace before (after) it.
//
// With parse_special false, control and unknown tokens are left in the text,
// but user-defined tokens are still split out (Hugging Face's "added tokens"
// behave that way).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace kvlm {

struct Fragment {
  int32_t token = -1;  // a special token, or -1 for text
  size_t begin = 0;    // text: byte range [begin, end) of the input
  size_t end = 0;
  bool is_text() const { return token < 0; }
};

// Fragments of `text` in order. Empty text gives no fragments; text
// fragments are never empty.
std::vector<Fragment> split_special_tokens(const Vocab& vocab, std::string_view text, bool parse_special);

}  // namespace kvlm
