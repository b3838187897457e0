// Regex pre-tokenization for byte-level BPE, as llama.cpp's
// unicode_regex_split does it: the expressions run in sequence, each one
// splitting every piece the previous one produced; inside a piece, matches
// and the unmatched text between them both become pieces. Matching happens
// within one piece at a time, so a lookahead never sees past its piece.
//
// Engine: PCRE2 (UTF + UCP, JIT-compiled once at load). llama.cpp runs these
// expressions with hand-written splitters (GPT-2, Llama-3) or std::regex over
// a text where each non-ASCII code point is collapsed to a stand-in for its
// category; translate_regex rewrites an expression so PCRE2 gives the same
// answers. Known remaining difference: PCRE2 10.42 carries Unicode 14 tables,
// llama.cpp's are newer, so code points assigned since then (rare CJK
// extensions, a few emoji) may be classified differently.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvlm {

// A byte range [begin, end) of the text being split.
struct TextRange {
  size_t begin = 0;
  size_t end = 0;
  size_t size() const { return end - begin; }
};

// Rewrites a llama.cpp pre-tokenizer expression into an equivalent PCRE2 one:
//  - \s and \S become llama.cpp's whitespace set (the Unicode White_Space
//    property: \t-\r, space, U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028,
//    U+2029, U+202F, U+205F, U+3000) instead of PCRE2's, which lacks U+0085;
//  - \d becomes [0-9] (llama.cpp's engines are ASCII there);
//  - \p{S} leaves out '~': llama.cpp's ASCII table for symbols omits it, so
//    in its engine '~' is no symbol (a class with \p{S} and no literal '~'
//    is wrapped: positive -> (?:(?!~)[...]), negated -> (?:~|[^...])).
std::string translate_regex(std::string_view llama_regex);

class PreTokenizer {
 public:
  // Compiles the expressions (llama.cpp syntax). Throws Error(kInternal)
  // naming the expression if PCRE2 refuses one.
  explicit PreTokenizer(const std::vector<std::string_view>& regexes);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Splits `text` into words. Precondition: `text` is well-formed UTF-8 (see
  // unicode::normalize_like_llama). `words` is replaced by consecutive,
  // non-empty ranges that tile the whole text. Thread-safe (const; the match
  // state lives on the caller's stack).
  void split(std::string_view text, std::vector<TextRange>& words) const;

  size_t num_regexes() const { return regexes_.size(); }

 private:
  struct Regex;
  std::vector<std::unique_ptr<Regex>> regexes_;
};

}  // namespace kvlm
