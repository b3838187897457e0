// UTF-8 and byte-level helpers shared by the tokenizers and the detokenizer.
//
// Two UTF-8 readers live here on purpose:
//  - the strict one (utf8_step) follows the Unicode definition of well-formed
//    UTF-8 and is what the streaming detokenizer and the regex engine need;
//  - the lenient one (normalize_like_llama) reproduces llama.cpp's
//    unicode_cpts_from_utf8, which BPE tokenization is defined by: every byte
//    that does not start a sequence it accepts becomes U+FFFD, overlong forms
//    are accepted and re-encoded, surrogates pass through.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kvlm::unicode {

// Length of the sequence a lead byte announces, as llama.cpp's
// unicode_len_utf8: 1 for ASCII and for stray continuation bytes, 2 for
// 0xC0-0xDF, 3 for 0xE0-0xEF, 4 for 0xF0-0xFF. Callers clip it to the bytes left.
inline size_t lead_byte_length(uint8_t lead) {
  static constexpr uint8_t kLengths[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLengths[lead >> 4];
}

// Appends the UTF-8 encoding of `cp` (any value up to 0x10FFFF, surrogates
// included, as llama.cpp's unicode_cpt_to_utf8 does).
void append_utf8(uint32_t cp, std::string& out);

// One step of strict UTF-8 decoding at `pos` (pos < s.size()).
struct Utf8Step {
  enum class Kind {
    kValid,       // a well-formed sequence of `length` bytes
    kIncomplete,  // the rest of `s` (`length` bytes) is a valid but unfinished prefix
    kInvalid,     // an ill-formed maximal subpart of `length` (>= 1) bytes
  };
  Kind kind = Kind::kValid;
  size_t length = 1;
};
Utf8Step utf8_step(std::string_view s, size_t pos);

// True if `s` is entirely well-formed UTF-8.
bool is_valid_utf8(std::string_view s);

// Replaces every ill-formed maximal subpart with U+FFFD; a valid but unfinished
// sequence at the end also becomes one U+FFFD.
std::string sanitize_utf8(std::string_view s);

// llama.cpp's view of `text` for BPE pre-tokenization. When `text` is
// well-formed UTF-8 (the common case) both outputs stay empty and the function
// returns false: use `text` itself. Otherwise it returns true and fills
//  - `normalized`: the code points llama.cpp decodes, re-encoded (invalid
//    bytes -> U+FFFD each, overlong forms -> their shortest form, surrogates
//    kept as 3-byte sequences, values above 0x10FFFF -> U+FFFD where llama.cpp
//    would throw);
//  - `regex_view`: the same bytes with each surrogate replaced by U+E000, a
//    private-use code point of the same regex classes (not a letter, number,
//    mark, punctuation, symbol or space), because PCRE2 refuses surrogates.
// Both have the same length, so match offsets in one are offsets in the other.
bool normalize_like_llama(std::string_view text, std::string& normalized, std::string& regex_view);

// GPT-2 byte-level encoding: each byte maps to one printable code point
// (bytes_to_unicode in OpenAI's encoder.py).
uint32_t byte_to_codepoint(uint8_t byte);
// The UTF-8 of byte_to_codepoint(byte), precomputed.
const std::string& byte_to_utf8(uint8_t byte);
// Inverse of byte_to_codepoint; nullopt for code points outside the mapping.
std::optional<uint8_t> codepoint_to_byte(uint32_t cp);

// Decodes one code point leniently (llama.cpp rules) at `pos`, advancing it;
// returns nullopt for a byte llama.cpp rejects (it advances by one).
std::optional<uint32_t> decode_lenient(std::string_view s, size_t& pos);

}  // namespace kvlm::unicode
