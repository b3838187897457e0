// The grammar AST, its compilation and the matcher, on hand-built grammars.
#include <gtest/gtest.h>

#include "common/error.h"

#include "constrain/constraint.h"
#include "constrain/matcher.h"
#include "unit/constrain/constrain_test_helpers.h"

namespace kvlm::constrain {
namespace {

using test_helpers::matches;

TEST(Grammar, LiteralAcceptsItselfOnly) {
  Grammar g;
  g.set_root(literal("abc"));
  auto p = grammar_program(g);
  EXPECT_TRUE(matches(p, "abc"));
  EXPECT_FALSE(matches(p, "ab"));
  EXPECT_FALSE(matches(p, "abcd"));
  Matcher m(p);
  EXPECT_TRUE(m.advance("ab"));
  EXPECT_FALSE(m.accepting());
  EXPECT_FALSE(m.advance("x"));  // refused, state kept
  EXPECT_TRUE(m.advance("c"));
  EXPECT_TRUE(m.complete());
}

TEST(Grammar, RepeatHonoursMinAndMax) {
  Grammar g;
  g.set_root(literal("<") + repeat(literal("ab"), 2, 3) + literal(">"));
  auto p = grammar_program(g);
  EXPECT_FALSE(matches(p, "<ab>"));
  EXPECT_TRUE(matches(p, "<abab>"));
  EXPECT_TRUE(matches(p, "<ababab>"));
  EXPECT_FALSE(matches(p, "<abababab>"));
}

TEST(Grammar, LargeRepeatOfBigExpressionUsesCalls) {
  Grammar g;
  const Expr item = alt({literal("xy"), literal("z") + repeat(byte_range('0', '9'), 1, 3)});
  g.set_root(repeat(item, 0, 2000));
  auto p = grammar_program(g);
  EXPECT_LT(p->num_states(), 20000);  // copies would take far more
  std::string s;
  for (int i = 0; i < 2000; ++i) s += i % 2 ? "xy" : "z12";
  EXPECT_TRUE(matches(p, s));
  EXPECT_FALSE(matches(p, s + "xy"));
}

TEST(Grammar, RecursionThroughRules) {
  // Balanced parentheses: S = "(" S ")" S | "".
  Grammar g;
  const RuleId s = g.add_rule("s");
  g.define(s, optional(literal("(") + ref(s) + literal(")") + ref(s)));
  g.set_root(ref(s));
  auto p = grammar_program(g);
  EXPECT_TRUE(matches(p, ""));
  EXPECT_TRUE(matches(p, "(()())()"));
  EXPECT_FALSE(matches(p, "(()"));
  EXPECT_FALSE(matches(p, "())"));
}

TEST(Grammar, ComposedToolCallsRepeated) {
  Grammar g;
  const Expr call = literal("<tool_call>") +
                    json_schema_expr(g, Json::parse(R"({"type":"object","properties":{"x":{"type":"integer"}},"required":["x"]})")) +
                    literal("</tool_call>");
  g.set_root(repeat(call, 1, std::nullopt));
  auto p = grammar_program(g);
  EXPECT_TRUE(matches(p, R"(<tool_call>{"x":1}</tool_call>)"));
  EXPECT_TRUE(matches(p, R"(<tool_call>{"x":1}</tool_call><tool_call>{"x":-20}</tool_call>)"));
  EXPECT_FALSE(matches(p, R"(<tool_call>{"x":"1"}</tool_call>)"));
  EXPECT_FALSE(matches(p, ""));
}

TEST(Grammar, QuadraticClosuresAreRefused) {
  Grammar g;
  // Inline copies (small enough not to become calls) whose epsilon closures
  // each span every later copy: 845,000 entries a copy of x, millions together.
  const Expr x = repeat(optional(literal("a")), 0, 1300);
  g.set_root(seq({x, literal("b"), x, literal("c"), x, literal("d"), x, literal("e"), x, literal("f"), x}));
  EXPECT_THROW(grammar_program(g), Error);
}

TEST(Grammar, UndefinedRuleIsRefused) {
  Grammar g;
  g.set_root(ref(g.add_rule("nowhere")));
  EXPECT_THROW(grammar_program(g), Error);
}

TEST(Grammar, Utf8ClassMatchesEncodedCodepoints) {
  Grammar g;
  g.set_root(repeat(utf8_class({{0x41, 0x5A}, {0xE9, 0xE9}, {0x4E00, 0x9FFF}, {0x1F600, 0x1F64F}}), 1, std::nullopt));
  auto p = grammar_program(g);
  EXPECT_TRUE(matches(p, "AZ\xC3\xA9\xE4\xB8\x80\xF0\x9F\x98\x80"));  // A Z é 一 😀
  EXPECT_FALSE(matches(p, "a"));
  EXPECT_FALSE(matches(p, "\xC3\xA8"));      // è
  EXPECT_FALSE(matches(p, "\xF0\x9F\x99\x90"));  // U+1F650, past the range
  // Every code point of a mixed range round-trips; its neighbours do not.
  Grammar h;
  h.set_root(utf8_class({{0x7F0, 0x10010}}));
  auto q = grammar_program(h);
  for (uint32_t cp : {0x7F0u, 0x7FFu, 0x800u, 0xFFFu, 0x1000u, 0xD7FFu, 0xE000u, 0xFFFFu, 0x10000u, 0x10010u})
    EXPECT_TRUE(matches(q, utf8_encode(cp))) << std::hex << cp;
  for (uint32_t cp : {0x7EFu, 0x10011u, 0xD800u}) EXPECT_FALSE(matches(q, utf8_encode(cp))) << std::hex << cp;
}

TEST(Grammar, ChoiceIsExactMembership) {
  auto p = choice_program({"yes", "no", "maybe so"});
  EXPECT_TRUE(matches(p, "no"));
  EXPECT_TRUE(matches(p, "maybe so"));
  EXPECT_FALSE(matches(p, "maybe"));
  EXPECT_FALSE(matches(p, "yess"));
  EXPECT_THROW(choice_program({}), Error);
}

}  // namespace
}  // namespace kvlm::constrain
