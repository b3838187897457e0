// The regex compiler against PCRE2 (anchored full matches) on fixed patterns
// and strings, plus the JSON-string spelling and the refusals.

#include <random>

#include <gtest/gtest.h>

#include "common/error.h"
#include "constrain/constraint.h"
#include "constrain/matcher.h"
#include "constrain/regex.h"
#include "support/test_support.h"
#include "unit/constrain/constrain_test_helpers.h"

namespace kvlm::constrain {
namespace {

using test_helpers::matches;

TEST(Regex, AgreesWithPcre2) {
  const std::vector<std::string> patterns = {
      "abc",          "a|bc|",        "(ab)*c",        "a+b?c{2,3}",   "[a-c]{1,4}x",    "[^abc]+",
      "\\d{3}-\\d{2}", "\\w+@\\w+\\.com", "(?:x|yz){0,3}", "[\\-a]+",      "a.c",            "\\s*\\S",
      "[0-9a-f]{2}",  "(a|b)+b{2}",   "\\.\\*\\+",     "x{2}y{1,}",    "[\\]a]+",        "(a(b(c)?)?)?d"};
  std::mt19937 rng(7);
  const std::string alphabet = "abcxyz019-.@*+ ]\n";
  for (const std::string& pat : patterns) {
    auto p = regex_program(pat);
    for (int i = 0; i < 300; ++i) {
      std::string s;
      const int len = static_cast<int>(rng() % 9);
      for (int k = 0; k < len; ++k) s += alphabet[rng() % alphabet.size()];
      EXPECT_EQ(matches(p, s), test::pcre_full_match(pat, s)) << "pattern " << pat << " on '" << s << "'";
    }
  }
}

TEST(Regex, AnchorsIgnoredAndUnicode) {
  auto p = regex_program("^h[éa]llo$");
  EXPECT_TRUE(matches(p, "hallo"));
  EXPECT_TRUE(matches(p, "h\xC3\xA9llo"));
  EXPECT_FALSE(matches(p, "hello"));
  auto any = regex_program(".{2}");
  EXPECT_TRUE(matches(any, "\xE4\xB8\x80z"));
  EXPECT_FALSE(matches(any, "a\n"));
}

TEST(Regex, JsonStringSpellingEscapes) {
  Grammar g;
  g.set_root(regex_expr("a\"\\\\\\n[\\t]", /*json_string=*/true));
  auto p = grammar_program(g);
  EXPECT_TRUE(matches(p, "a\\\"\\\\\\n\\t"));
  EXPECT_FALSE(matches(p, "a\"\\\n\t"));
}

TEST(Regex, RefusesWhatItCannotDo) {
  for (const char* bad : {"(a", "a)", "[abc", "*a", "\\b", "(?=a)", "a{3,1}", "\\1", "(?i)a"}) {
    try {
      regex_program(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("regex:"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace kvlm::constrain
