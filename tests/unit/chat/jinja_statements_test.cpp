// Jinja statements through ChatTemplate: if/elif/else, for loops (the loop
// variable, else, break/continue, unpacking, inline filters, scoping), set
// (plain, tuple, block, namespace attributes), macros and call blocks,
// filter blocks and with. Every expected string in the tables was produced
// by Python's Jinja2 3.1 configured as Hugging Face does.
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
const Case kIf[] = {
  {"if_elif_else", "{% for n in [1, 2, 3] %}{% if n == 1 %}one{% elif n == 2 %}two{% else %}many{% endif %},{% endfor %}", "{}", "one,two,many,"},
  {"truthiness_of_conditions", "{% if [] %}a{% endif %}{% if {} %}b{% endif %}{% if '' %}c{% endif %}{% if 'x' %}d{% endif %}{% if nothing %}e{% endif %}", "{}", "d"},
  {"nested", "{% if true %}{% if false %}x{% else %}y{% endif %}{% endif %}", "{}", "y"},
};

const Case kFor[] = {
  {"loop_variables", "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }} {% endfor %}", "{}",
   "1032TrueFalse3 2121FalseFalse3 3210FalseTrue3 "},
  {"previtem_nextitem_cycle", "{% for i in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }}-{{ loop.cycle('a', 'b') }} {% endfor %}", "{}", "-2-a 1-3-b 2--a "},
  {"changed", "{% for i in [1, 1, 2, 2, 1] %}{{ loop.changed(i) }},{% endfor %}", "{}", "True,False,True,False,True,"},
  {"loop_is_gone_after_the_loop", "{% for i in [1] %}{% endfor %}[{{ loop }}]", "{}", "[]"},
  {"else_branch", "{% for i in [] %}x{% else %}empty{% endfor %}", "{}", "empty"},
  {"inline_filter_counts_kept_items", "{% for i in [1, 2, 3] if i > 1 %}{{ loop.index }}/{{ loop.length }}{{ loop.last }} {% else %}none{% endfor %}", "{}", "1/2False 2/2True "},
  {"inline_filter_can_empty_the_loop", "{% for i in [1, 2] if i > 5 %}x{% else %}none{% endfor %}", "{}", "none"},
  {"break_and_continue", "{% for i in range(10) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 4 %}{% break %}{% endif %}{{ i }}{% endfor %}", "{}", "023"},
  // Jinja2's else runs unless some pass reached the end of the body (not Python's for/else).
  {"else_after_break_only_passes", "{% for i in [1] %}{% break %}{% else %}else{% endfor %}done", "{}", "elsedone"},
  {"else_skipped_after_a_full_pass", "{% for i in [1, 2] %}{% if i == 2 %}{% break %}{% endif %}{% else %}else{% endfor %}done", "{}", "done"},
  {"tuple_unpacking", "{% for a, b in [(1, 2), (3, 4)] %}{{ a }}{{ b }};{% endfor %}{% for k, v in {'x': 1, 'y': 2}.items() %}{{ k }}={{ v }};{% endfor %}", "{}", "12;34;x=1;y=2;"},
  {"items_filter_unpacking", "{% for k, v in d|items %}{{ k }}{{ v }}{% endfor %}", R"J({"d": {"b": 1, "a": 2}})J", "b1a2"},
  {"dict_iterates_keys_string_iterates_chars", "{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}{% for c in 'hé' %}[{{ c }}]{% endfor %}", "{}", "xy[h][é]"},
  {"nested_loops_have_their_own_loop", "{% for i in range(2) %}{% for j in range(2) %}{{ loop.index }}{{ i }}{{ j }} {% endfor %}{{ loop.index }}|{% endfor %}", "{}", "100 201 1|110 211 2|"},
  {"set_inside_loop_does_not_leak", "{% set x = 5 %}{% for i in range(3) %}[{{ x }}]{% set x = i %}{% endfor %}{{ x }}", "{}", "[5][5][5]5"},
  {"set_does_not_carry_between_iterations", "{% for i in range(3) %}[{{ y }}]{% set y = i %}{% endfor %}", "{}", "[][][]"},
  {"range_forms", "{% for i in range(10, 0, -3) %}{{ i }},{% endfor %}{% for i in range(2, 5) %}{{ i }}{% endfor %}", "{}", "10,7,4,1,234"},
  {"loop_over_messages", "{% for m in messages %}{{ m.role }}:{{ m['content'] }};{% endfor %}", R"J({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]})J", "user:a;assistant:b;"},
};

const Case kSet[] = {
  {"tuple_assignment", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c = 1, 2 %}{{ c }}", "{}", "12(1, 2)"},
  {"tuple_target_with_namespace_attribute", "{% set ns = namespace() %}{% set a, ns.c = 1, 2 %}{{ a }}{{ ns.c }}", "{}", "12"},
  {"parenthesised_targets", "{% set (a, b) = 'xy' %}{{ b }}{{ a }}{% for (p, q), r in [((1, 2), 3)] %}{{ p }}{{ q }}{{ r }}{% endfor %}", "{}", "yx123"},
  {"block_set", "{% set x %}  hi {{ 1 }} {% endset %}[{{ x }}]", "{}", "[  hi 1 ]"},
  {"block_set_with_filter", "{% set y | upper | trim %}  abc  {% endset %}[{{ y }}]", "{}", "[ABC]"},
  {"namespace_carries_out_of_loops", "{% set ns = namespace(n=0, seen=false) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }} {{ ns.seen }} {{ ns }}", "{}", "6 False <Namespace {'n': 6, 'seen': False}>"},
  {"namespace_from_empty", "{% set ns = namespace() %}{% set ns.index = 0 %}{% for m in [1, 2] %}{% set ns.index = ns.index + 1 %}{% endfor %}{{ ns.index }}", "{}", "2"},
  {"top_level_set_shadows_context", "{% set messages = messages[1:] %}{{ messages|length }}", R"J({"messages": [1, 2, 3]})J", "2"},
};

const Case kMacro[] = {
  {"defaults_and_keywords", "{% macro m(a, b=2) %}{{ a }}-{{ b }}{% endmacro %}{{ m(1) }} {{ m(1, b=3) }} {{ m(b=5, a=4) }} [{{ m() }}]", "{}", "1-2 1-3 4-5 [-2]"},
  {"defaults_see_earlier_parameters", "{% macro m(a, b=a * 2) %}{{ a }}-{{ b }}{% endmacro %}{{ m(3) }}", "{}", "3-6"},
  {"varargs_and_kwargs", "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, z=4) }}", "{}", "1(2, 3){'z': 4}"},
  {"prints_as_macro", "{% macro m() %}{% endmacro %}{{ m }}", "{}", "<Macro 'm'>"},
  {"sees_enclosing_variables_at_call_time", "{% set x = 1 %}{% macro m() %}{{ x }}{% endmacro %}{% set x = 2 %}{{ m() }}", "{}", "2"},
  {"recursion", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }}", "{}", "120"},
  {"result_is_a_string", "{% macro m() %} x {% endmacro %}[{{ m()|trim }}]{{ m() is string }}", "{}", "[x]True"},
  {"call_block", "{% macro wrap() %}[{{ caller() }}]{% endmacro %}{% call wrap() %}body{% endcall %}", "{}", "[body]"},
  {"call_block_with_arguments", "{% macro each(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}{% call(x) each([1, 2]) %}<{{ x }}>{% endcall %}", "{}", "<1><2>"},
};

const Case kOtherBlocks[] = {
  {"filter_block", "{% filter upper %}hello {{ 'x' }}{% endfilter %}", "{}", "HELLO X"},
  {"filter_block_chain", "{% filter trim|title %}  a b  {% endfilter %}", "{}", "A B"},
  {"with_block_scopes_its_names", "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]", "{}", "3[]"},
  {"raise_exception_in_unused_branch_is_harmless", "{% if false %}{{ raise_exception('no') }}{% endif %}ok", "{}", "ok"},
};
// clang-format on

KVLM_JINJA_RENDER_SUITE(JinjaIf, kIf);

KVLM_JINJA_RENDER_SUITE(JinjaFor, kFor);

KVLM_JINJA_RENDER_SUITE(JinjaSet, kSet);

KVLM_JINJA_RENDER_SUITE(JinjaMacro, kMacro);

KVLM_JINJA_RENDER_SUITE(JinjaOtherBlocks, kOtherBlocks);

// Hugging Face renders in Jinja2's ImmutableSandboxedEnvironment: methods
// that would modify a list or dict read as undefined and fail when called.
TEST(JinjaStatements, MutatingMethodsAreRefusedLikeTheSandbox) {
  EXPECT_EQ(render("{% set l = [1] %}[{{ l.append }}]{{ l.append is defined }}{{ l.copy() }}", "{}"), "[]False[1]");
  EXPECT_EQ(render("{{ d.update is defined }} {{ d['update'] }}", R"J({"d": {"update": 5}})J"), "False 5");
  EXPECT_EQ(error_of("{% set l = [] %}\n{{ l.append(1) }}"),
            "template error at line 2, column 12: access to attribute 'append' of 'list' object is unsafe.");
}

TEST(JinjaStatements, SetAttributeNeedsANamespace) {
  EXPECT_EQ(error_of("{% set d = {} %}{% set d.x = 1 %}"),
            "template error at line 1, column 17: cannot assign attribute 'x' on 'd': not a namespace() object");
}

TEST(JinjaStatements, RunawayMacroRecursionIsAnError) {
  // Jinja2 hits Python's recursion limit; we stop at a fixed depth instead of the stack.
  const std::string err = error_of("{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}");
  EXPECT_NE(err.find("maximum recursion depth"), std::string::npos) << err;
}

TEST(JinjaStatements, MacroArgumentGivenTwice) {
  EXPECT_THROW(render("{% macro m(a) %}{% endmacro %}{{ m(1, a=2) }}", "{}"), Error);
}

}  // namespace
}  // namespace kvlm
