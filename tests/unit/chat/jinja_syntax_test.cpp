// The Jinja lexer and parser through ChatTemplate: whitespace control as
// Hugging Face configures Jinja2 (trim_blocks + lstrip_blocks), raw blocks,
// comments, literals, and syntax errors with their line and column.
// Every expected string here was produced by Python's Jinja2 3.1 in HF's
// configuration (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "chat/chat_template.h"
#include "unit/chat/jinja_test_util.h"

namespace kvlm {
namespace {

using jinja_test::Case;
using jinja_test::error_of;
using jinja_test::render;

// clang-format off
const Case kWhitespace[] = {
  {"trim_blocks_drops_newline_after_tag", R"J(a
{% if true %}
x
{% endif %}
b)J", "{}", "a\nx\nb"},
  {"lstrip_blocks_drops_indent_before_tag", "a\n  {% if true %}\n  x\n  {% endif %}\nb\n", "{}", "a\n  x\nb"},
  {"lstrip_only_when_tag_starts_the_line", "a  {% if true %}x{% endif %}  \n  {{ 1 }}  {# c #}\n  {# d #}\nq", "{}", "a  x  \n  1  q"},
  {"variables_are_not_lstripped", "  {{ 1 }}\n  {{ 2 }}", "{}", "  1\n  2"},
  {"one_trailing_newline_dropped", "x\n\n", "{}", "x\n"},
  {"crlf_normalised", "\t{% if true %}\r\n\tA\r\n\t{% endif %}\r\nB\r\n\r\n", "{}", "\tA\nB\n"},
  {"minus_strips_both_sides", "x {{- 1 -}} \n y", "{}", "x1y"},
  {"minus_on_blocks", "a{%- if true -%}\n\n  b  \n\n{%- endif -%}c", "{}", "abc"},
  {"plus_keeps_indent_and_newline", "x\n    {%+ if true %}y{% endif +%}\nz", "{}", "x\n    y\nz"},
  {"comments_strip_and_trim", "{# c -#}  \n x {#- d #}y", "{}", "xy"},
  {"comment_plus_keeps_newline", "a\n  {# c +#}\nb", "{}", "a\n\nb"},
  {"comment_plus_keeps_indent", "a\n  {#+ c #}\nb", "{}", "a\n  b"},
  {"raw_block_is_text", "  {% raw %}\n {{x}} {% endraw %}\nz", "{}", "\n {{x}} z"},
  {"raw_block_with_minus", "a {%- raw -%}  {{x}}  {%- endraw -%}  z", "{}", "a{{x}}z"},
  {"loop_body_lines", "{% for i in range(3) %}\n  {{ i }}\n{% endfor %}\n", "{}", "  0\n  1\n  2\n"},
  {"dict_braces_inside_print", "{{ {'a': {'b': 1}} }}", "{}", "{'a': {'b': 1}}"},
};

const Case kLiterals[] = {
  {"string_escapes", R"J({{ "a\nb\x41\u00e9\d" }}|{{ 'it\'s' }})J", "{}", "a\nbAé\\d|it's"},
  {"adjacent_strings_concatenate", R"J({{ "a" 'b' "c" }})J", "{}", "abc"},
  {"numbers", "{{ 0x1F }} {{ 1_000 }} {{ 0b101 }} {{ 0o17 }} {{ 1.5e3 }} {{ 2E-3 }} {{ 1.0 }}", "{}", "31 1000 5 15 1500.0 0.002 1.0"},
  {"constants_both_cases", "{{ none }} {{ None }} {{ true }} {{ True }} {{ false }} {{ False }}", "{}", "None None True True False False"},
  {"list_tuple_dict", "{{ [1, 'a', none, true, 1.5] }} {{ (1,) }} {{ (1, 2) }} {{ () }} {{ {'k': [1]} }}", "{}", "[1, 'a', None, True, 1.5] (1,) (1, 2) () {'k': [1]}"},
  {"print_tuple_without_parens", "{{ 1, 'b' }}", "{}", "(1, 'b')"},
  {"trailing_commas", "{{ [1, 2,] }} {{ {'a': 1,} }}", "{}", "[1, 2] {'a': 1}"},
  {"float_repr", "{{ 1e20 }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ 1/3 }} {{ 0.1 + 0.2 }}", "{}", "1e+20 1e+16 1000000000000000.0 0.0001 1e-05 0.3333333333333333 0.30000000000000004"},
  {"unicode_names", "{% set ñame = 1 %}{{ ñame }}|{{ x.ü }}|{{ é }}|", R"J({"x": {"ü": 3}})J", "1|3||"},
  {"string_repr_in_containers", R"J({{ ["it's", 'say "x"', "both ' \"", "tab\tnl\n", "é\u200b"] }})J", "{}", R"J(["it's", 'say "x"', 'both \' "', 'tab\tnl\n', 'é\u200b'])J"},
};
// Jinja2 refuses unknown filters and tests when it compiles a template,
// except inside if statements and inline ifs, where they fail only if run.
const Case kSoftUnknownNames[] = {
  {"if_branch_not_taken", "{% if false %}{{ x|nosuch }}{% elif x %}{{ x is nosuch }}{% else %}{{ 1|trim }}{% endif %}ok", "{}", "1ok"},
  {"nested_ifs", "{% if false %}{% if true %}{{ 1|nosuch }}{% endif %}{% endif %}ok", "{}", "ok"},
  {"inline_if_not_taken", "{{ y|nosuch if false else 1 }}", "{}", "1"},
  {"if_inside_a_loop", "{% for i in [1] %}{% if false %}{{ 1|nosuch }}{% endif %}{% endfor %}ok", "{}", "ok"},
  {"dotted_names_are_unknown_names", "{% if false %}{{ l|ext.f }}{{ x is ext.t }}{% endif %}ok", "{}", "ok"},
  {"loop_header_inside_if", "{% if false %}{% for i in [1]|nosuch %}{% endfor %}{% endif %}ok", "{}", "ok"},
};
// clang-format on

KVLM_JINJA_RENDER_SUITE(JinjaSoftUnknownNames, kSoftUnknownNames);

TEST(JinjaSyntax, UnknownFilterInATakenBranchFailsAtRuntime) {
  EXPECT_EQ(error_of("{% if true %}\n{{ x|nosuch }}{% endif %}"), "template error at line 2, column 6: no filter named 'nosuch'");
}

KVLM_JINJA_RENDER_SUITE(JinjaWhitespace, kWhitespace);

KVLM_JINJA_RENDER_SUITE(JinjaLiterals, kLiterals);

// Syntax errors: the full message, position included.
struct SyntaxCase {
  const char* name;
  const char* source;
  const char* message;
};

// clang-format off
const SyntaxCase kSyntaxErrors[] = {
  {"empty_if", "{% if %}", "template syntax error at line 1, column 7: expected an expression, got end of statement block"},
  {"missing_endfor", "ok\n{% for x in y %}\nbody", "template syntax error at line 3, column 5: unexpected end of template: expected 'else' or 'endfor' to close 'for'"},
  {"unknown_tag", "\n\n  {% foo %}", "template syntax error at line 3, column 6: unknown tag 'foo'"},
  {"stray_end_tag", "{% endif %}", "template syntax error at line 1, column 4: unexpected 'endif' tag: no open block expects it here"},
  {"second_else", "{% if x %}{% else %}{% else %}{% endif %}", "template syntax error at line 1, column 24: unexpected 'else' tag: no open block expects it here"},
  {"unterminated_string", "{{ 'abc }}", "template syntax error at line 1, column 4: unterminated string literal"},
  {"unterminated_tag", "a\n{{ x", "template syntax error at line 2, column 1: unterminated tag: missing '}}'"},
  {"unterminated_comment", "{# never closed", "template syntax error at line 1, column 1: unterminated comment: missing '#}'"},
  {"unterminated_raw", "{% raw %} x", "template syntax error at line 1, column 1: unterminated raw block: missing '{% endraw %}'"},
  {"mismatched_bracket", "{{ (1, 2 }}", "template syntax error at line 1, column 10: unexpected '}', expected ')'"},
  {"unclosed_bracket", "{{ [1, 2", "template syntax error at line 1, column 4: unclosed '['"},
  {"bad_character", "{{ x ! y }}", "template syntax error at line 1, column 6: unexpected character '!'"},
  {"unknown_filter", "{{ x|nosuch }}", "template syntax error at line 1, column 6: no filter named 'nosuch'"},
  {"unknown_test", "{{ x is nosuch }}", "template syntax error at line 1, column 9: no test named 'nosuch'"},
  {"unknown_filter_in_loop_inside_if", "{% if false %}{% for i in [1] %}{{ i|nosuch }}{% endfor %}{% endif %}", "template syntax error at line 1, column 38: no filter named 'nosuch'"},
  {"unknown_filter_in_macro_inside_if", "{% if x %}{% macro m() %}{{ 1|nosuch }}{% endmacro %}{% endif %}", "template syntax error at line 1, column 31: no filter named 'nosuch'"},
  {"unknown_filter_beside_an_inline_if", "{{ [y|nosuch, (1 if true else 2)] }}", "template syntax error at line 1, column 7: no filter named 'nosuch'"},
  {"break_outside_loop", "{% break %}", "template syntax error at line 1, column 4: 'break' outside of a for loop"},
  {"assign_to_literal", "{% set true = 1 %}", "template syntax error at line 1, column 8: cannot assign to 'true'"},
  {"trailing_comma_in_macro_signature", "{% macro m(a,) %}{% endmacro %}", "template syntax error at line 1, column 14: expected a name, got ')'"},
  {"positional_after_keyword", "{{ f(a=1, 2) }}", "template syntax error at line 1, column 11: positional argument after keyword argument"},
  {"column_counts_code_points", "é {{ 1 + }}", "template syntax error at line 1, column 10: expected an expression, got end of print statement"},
};
// clang-format on

class JinjaSyntaxErrors : public ::testing::TestWithParam<SyntaxCase> {};
TEST_P(JinjaSyntaxErrors, AreRefusedWithPosition) {
  try {
    ChatTemplate::parse(GetParam().source);
    FAIL() << "parsed without error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(std::string(e.what()), GetParam().message);
  }
}
INSTANTIATE_TEST_SUITE_P(Jinja, JinjaSyntaxErrors, ::testing::ValuesIn(kSyntaxErrors),
                         jinja_test::case_name<SyntaxCase>);

// Hugging Face's AssistantTracker extension adds {% generation %} to mark
// assistant text; rendering treats it as a plain block.
TEST(JinjaSyntax, GenerationBlockRendersItsBody) {
  EXPECT_EQ(render("a{% generation %}gen {{ 1 }}{% endgeneration %}b", "{}"), "agen 1b");
}

// Jinja2 has `for ... recursive`; no chat template we know uses it, so it is
// refused clearly rather than half-supported.
TEST(JinjaSyntax, RecursiveLoopsAreRefused) {
  try {
    ChatTemplate::parse("{% for x in y recursive %}{% endfor %}");
    FAIL() << "parsed";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "template syntax error at line 1, column 15: recursive for loops are not supported");
  }
}

TEST(JinjaSyntax, DeepNestingIsRefusedNotACrash) {
  std::string deep(5000, '(');
  EXPECT_THROW(ChatTemplate::parse("{{ " + deep + "1" + std::string(5000, ')') + " }}"), Error);
  std::string blocks;
  for (int i = 0; i < 5000; ++i) blocks += "{% if true %}";
  EXPECT_THROW(ChatTemplate::parse(blocks), Error);
  // Long left-deep chains are loops in the parser but recursion when evaluated.
  std::string sum = "{{ 1";
  for (int i = 0; i < 20000; ++i) sum += " + 1";
  EXPECT_THROW(ChatTemplate::parse(sum + " }}"), Error);
  // ... while realistic lengths are fine.
  std::string small = "{{ 0";
  for (int i = 0; i < 100; ++i) small += " + 1";
  EXPECT_EQ(render((small + " }}").c_str(), "{}"), "100");
}

}  // namespace
}  // namespace kvlm
