// Pre-tokenizer: the PCRE2 translation of llama.cpp's expressions and the
// sequential splitting.
#include <gtest/gtest.h>

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/pre_types.h"
#include "tokenizer/unicode.h"

namespace kvlm {
namespace {

std::vector<std::string> split(const PreTokenizer& pre, std::string_view text) {
  std::vector<TextRange> ranges;
  pre.split(text, ranges);
  std::vector<std::string> words;
  for (const TextRange& r : ranges) words.emplace_back(text.substr(r.begin, r.size()));
  return words;
}

std::vector<std::string> split_with(std::string_view pre_name, std::string_view text) {
  PreTokenizer pre(find_pre_type(pre_name).regexes);
  return split(pre, text);
}

using Words = std::vector<std::string>;

TEST(TranslateRegex, WhitespaceIsLlamaCppSet) {
  const std::string ws = "\\x{9}-\\x{d}\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}";
  EXPECT_EQ(translate_regex("\\s+"), "[" + ws + "]+");
  EXPECT_EQ(translate_regex("(?!\\S)"), "(?![^" + ws + "])");
  EXPECT_EQ(translate_regex("[^\\s\\p{L}]"), "[^" + ws + "\\p{L}]");
  EXPECT_EQ(translate_regex("\\d{3}"), "[0-9]{3}");
}

TEST(TranslateRegex, TildeIsNoSymbol) {
  EXPECT_EQ(translate_regex("[\\p{P}\\p{S}]+"), "(?:(?!~)[\\p{P}\\p{S}])+");
  EXPECT_EQ(translate_regex("[^\\r\\p{S}]"), "(?:~|[^\\r\\p{S}])");
  EXPECT_EQ(translate_regex("\\p{S}"), "(?:(?!~)\\p{S})");
  EXPECT_EQ(translate_regex("[\\p{S}~]"), "[\\p{S}~]");     // an explicit '~' stays
  EXPECT_EQ(translate_regex("[\\]\\p{L}]"), "[\\]\\p{L}]");  // escaped ']' does not close the class
}

TEST(PreTokenizer, Gpt2) {
  EXPECT_EQ(split_with("gpt-2", "Hello world  foo\n\nbar's 3.14!!"),
            (Words{"Hello", " world", " ", " foo", "\n", "\n", "bar", "'s", " 3", ".", "14", "!!"}));
  // \s+(?!\S) keeps the last space for the next word; a lone newline before
  // a letter is left unmatched and becomes its own piece.
  EXPECT_EQ(split_with("gpt-2", "a   b\nc "), (Words{"a", "  ", " b", "\n", "c", " "}));
  // U+0085 (NEL) is whitespace for llama.cpp, not for PCRE2's \s.
  EXPECT_EQ(split_with("gpt-2", "a\u0085\u0085b"), (Words{"a", "\u0085", "\u0085", "b"}));
}

TEST(PreTokenizer, Llama3) {
  EXPECT_EQ(split_with("llama-bpe", "I'M 12345 héllo\r\n\n  x"),
            (Words{"I", "'M", " ", "123", "45", " héllo", "\r\n\n", " ", " x"}));
}

TEST(PreTokenizer, SequentialExpressions) {
  // deepseek-coder: [\r\n] first, then letters, punctuation, CJK, digits.
  EXPECT_EQ(split_with("deepseek-coder", "ab\ncd 12;我想"),
            (Words{"ab", "\n", "cd", " ", "1", "2", ";", "我想"}));
  // default: punctuation runs, then the GPT-2 expression, numbers, then 3-digit groups.
  EXPECT_EQ(split_with("default", "x=12345!"), (Words{"x", "=", "123", "45", "!"}));
}

// In llama.cpp's engine '~' is no \p{S}: deepseek-v3 leaves "~~" unmatched
// (its own piece) instead of joining it with the newline.
TEST(PreTokenizer, DeepseekV3Tilde) {
  EXPECT_EQ(split_with("deepseek-v3", "~~\n+\n"), (Words{"~~", "\n", "+\n"}));
}

TEST(PreTokenizer, EveryKnownTypeCompilesAndTiles) {
  const std::string text = "Hello, y'all! 1234567 ~~ naïve 我想在apple工作 \t\n  <sentinel:12> Ω x2 ...?";
  for (std::string_view name : known_pre_type_names()) {
    const PreTypeInfo info = find_pre_type(name);
    ASSERT_TRUE(info.known) << name;
    PreTokenizer pre(info.regexes);
    std::vector<TextRange> ranges;
    pre.split(text, ranges);
    size_t pos = 0;
    for (const TextRange& r : ranges) {
      EXPECT_EQ(r.begin, pos) << name;
      EXPECT_GT(r.size(), 0u) << name;
      EXPECT_TRUE(unicode::is_valid_utf8(std::string_view(text).substr(r.begin, r.size()))) << name;
      pos = r.end;
    }
    EXPECT_EQ(pos, text.size()) << name;
  }
}

TEST(PreTypes, FlagsFollowLlamaCpp) {
  EXPECT_TRUE(find_pre_type("llama-bpe").ignore_merges);
  EXPECT_TRUE(find_pre_type("llama-bpe").add_bos);
  EXPECT_FALSE(find_pre_type("qwen2").clean_spaces);
  EXPECT_TRUE(find_pre_type("gpt-2").clean_spaces);
  EXPECT_EQ(find_pre_type("").name, "default");
  EXPECT_FALSE(find_pre_type("unheard-of").known);
  EXPECT_EQ(find_pre_type("unheard-of").regexes, find_pre_type("gpt-2").regexes);
}

TEST(Unicode, LenientDecodingLikeLlamaCpp) {
  std::string normalized, view;
  EXPECT_FALSE(unicode::normalize_like_llama("plain ascii and ü", normalized, view));
  ASSERT_TRUE(unicode::normalize_like_llama("a\xff\xc0\x80\xed\xa0\x80", normalized, view));
  // bad byte -> U+FFFD, overlong NUL -> NUL, surrogate kept (and masked for the regex engine)
  EXPECT_EQ(normalized, std::string("a\xEF\xBF\xBD\0\xED\xA0\x80", 8));
  EXPECT_EQ(view, std::string("a\xEF\xBF\xBD\0\xEE\x80\x80", 8));
}

TEST(Unicode, ByteLevelMapping) {
  EXPECT_EQ(unicode::byte_to_utf8(' '), "\xC4\xA0");  // Ġ
  EXPECT_EQ(unicode::byte_to_utf8('\n'), "\xC4\x8A");  // Ċ
  EXPECT_EQ(unicode::byte_to_utf8('a'), "a");
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(unicode::codepoint_to_byte(unicode::byte_to_codepoint(static_cast<uint8_t>(b))), b);
  }
  EXPECT_FALSE(unicode::codepoint_to_byte(0x20).has_value());
}

}  // namespace
}  // namespace kvlm
