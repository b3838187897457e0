// Jinja expressions through ChatTemplate: operators with Python semantics,
// attribute / item access and slicing, Jinja2's default Undefined, Python
// truthiness and str() of values, and runtime errors with their position.
// Every expected string in the tables was produced by Python's Jinja2 3.1
// configured as Hugging Face does (sandboxed, trim_blocks, lstrip_blocks).
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
const Case kOperators[] = {
  {"arithmetic", "{{ 7 / 2 }} {{ -7 // 2 }} {{ 2 ** 10 }} {{ 10 % 3 }} {{ -7 % 3 }} {{ 5.5 % 2 }} {{ 2 ** -1 }} {{ 7.5 // 2 }}", "{}", "3.5 -4 1024 1 2 1.5 0.5 3.0"},
  {"bool_is_an_int", "{{ true + 1 }} {{ 1 == 1.0 }} {{ true == 1 }}", "{}", "2 True True"},
  {"pow_is_left_associative", "{{ 2 ** 3 ** 2 }} {{ -2 ** 2 }}", "{}", "64 4"},
  {"unary_binds_before_filters", "{{ -x|abs }} {{ -3|abs }}", R"J({"x": 3})J", "3 3"},
  {"filters_bind_tighter_than_plus", "{{ 'a' + ' b '|trim + 'c' }}", "{}", "abc"},
  {"sequences", "{{ 'ab' * 2 }} {{ 3 * [1, 2] }} {{ [1] + [2] }} {{ (1,) + (2,) }} {{ 'a' + 'b' }}", "{}", "abab [1, 2, 1, 2, 1, 2] [1, 2] (1, 2) ab"},
  {"tilde_stringifies", "{{ 'a' ~ 1 ~ none ~ true ~ nothing ~ [1] }}", "{}", "a1NoneTrue[1]"},
  {"comparison_chains", "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 2 >= 2.0 }}", "{}", "True False True True True"},
  {"in_and_not_in", "{{ 1 in [1, 2] }} {{ 'a' not in 'abc' }} {{ 'k' in {'k': 1} }} {{ 3 in {'k': 1} }} {{ 'x' in nothing }}", "{}", "True False True False False"},
  {"and_or_return_operands", "{{ 1 and 2 }} {{ 0 and 2 }} {{ 0 or 'x' }} {{ '' or [] }} {{ none or 0 }} {{ not 0 }}", "{}", "2 0 x [] 0 True"},
  {"not_binds_looser_than_is", "{{ not x is defined }} {{ not 1 == 2 }}", "{}", "True True"},
  {"conditional_expression", "{{ 1 if false }}|{{ 'a' if true else 'b' }}|{{ 'x' if 0 else 'y' if 1 else 'z' }}", "{}", "|a|y"},
  {"percent_formatting", R"J({{ "%s-%d" % ("a", 3) }} {{ "%05.2f|%-4s|%x|%r" % (3.14159, "ab", 255, "q") }} {{ "%(a)s" % {"a": 1} }} {{ "%s" % [1] }})J", "{}", "a-3 03.14|ab  |ff|'q' 1 [1]"},
  {"equality_across_types", "{{ [1, 2] == [1, 2] }} {{ [1] == (1,) }} {{ {'a': 1, 'b': 2} == {'b': 2, 'a': 1} }} {{ none == none }} {{ nothing == nothing }} {{ 'a' == 1 }}", "{}", "True False True True True False"},
};

const Case kAccess[] = {
  {"attribute_and_item", "{{ x.y.z }} {{ x['y']['z'] }} {{ x.y['z'] }}", R"J({"x": {"y": {"z": "deep"}}})J", "deep deep deep"},
  {"dict_methods_shadow_keys_for_dot", "{{ x.items is callable }} {{ x['items'] }} {{ x.get('items') }}", R"J({"x": {"items": 7}})J", "True 7 7"},
  {"numeric_attribute_is_an_index", "{{ x.0 }} {{ x.1.a }} {{ x[-1].a }}", R"J({"x": [5, {"a": 6}]})J", "5 6 6"},
  {"string_index_by_code_point", "{{ s[0] }}{{ s[1] }}{{ s[-1] }}", R"J({"s": "héllo"})J", "héo"},
  {"slices", "{{ [1, 2, 3, 4, 5][::2] }} {{ [1, 2, 3, 4, 5][-2:] }} {{ [1, 2, 3, 4, 5][4:1:-2] }} {{ [1, 2, 3][10:] }} {{ 'abc'[:-10] }}|", "{}", "[1, 3, 5] [4, 5] [5, 3] [] |"},
  {"string_slices_by_code_point", "{{ s[::-1] }} {{ s[1:3] }} {{ s[:-1] }}", R"J({"s": "héllo"})J", "olléh él héll"},
  {"tuple_slices_stay_tuples", "{{ (1, 2, 3)[1:] }}", "{}", "(2, 3)"},
  {"missing_items_are_undefined", "[{{ [1, 2][5] }}][{{ {'a': 1}['b'] }}][{{ 'abc'[9] }}]", "{}", "[][][]"},
  {"mapping_key_order_is_kept", "{% for k in d %}{{ k }}{% endfor %} {{ d }}", R"J({"d": {"z": 1, "a": 2, "m": 3}})J", "zam {'z': 1, 'a': 2, 'm': 3}"},
};

const Case kUndefined[] = {
  {"prints_empty", "[{{ nothing }}]", "{}", "[]"},
  {"is_falsy_and_empty", "{{ nothing is defined }} {{ nothing is undefined }} {{ nothing|length }} {{ nothing|list }} {{ not nothing }}", "{}", "False True 0 [] True"},
  {"iterates_as_empty", "{% for x in nothing %}x{% else %}empty{% endfor %}", "{}", "empty"},
  {"missing_attribute_of_a_value", "[{{ x.nope }}] {{ x.nope is defined }} {{ none.bar is defined }} {{ 's'.bar is defined }}", R"J({"x": {"a": 1}})J", "[] False False False"},
  {"default_filter", "{{ nothing|default('d') }} {{ ''|default('d', true) }} {{ none|default('d') }} {{ nothing|d('q') }}", "{}", "d d None q"},
  {"set_then_defined", "{% if not flag is defined %}{% set flag = false %}{% endif %}{{ flag }}", "{}", "False"},
};

const Case kPrinting[] = {
  {"python_str_of_scalars", "{{ none }} {{ true }} {{ 3 }} {{ 2.50 }} {{ -0.0 }} {{ 1e308 * 10 }} {{ -1e308 * 10 }}", "{}", "None True 3 2.5 -0.0 inf -inf"},
  {"python_repr_in_containers", R"J({{ [1, 'a', none, true, 1.5, {'k': "it's"}] }})J", "{}", R"J([1, 'a', None, True, 1.5, {'k': "it's"}])J"},
  {"json_values_print_as_python", "{{ m }}", R"J({"m": {"role": "user", "n": null, "ok": false, "x": [1.0, 2]}})J", "{'role': 'user', 'n': None, 'ok': False, 'x': [1.0, 2]}"},
  {"shared_values_print_twice", "{% set ns = namespace(a=[1]) %}{% set ns.b = ns.a %}{{ ns }}", "{}", "<Namespace {'a': [1], 'b': [1]}>"},
  {"self_reference_prints_like_python", "{% set ns = namespace() %}{% set ns.self = [ns] %}{{ ns }}", "{}", "<Namespace {'self': [<Namespace {...}>]}>"},
  {"truthiness", "{{ [] or 'e' }} {{ {} or 'e' }} {{ 0.0 or 'e' }} {{ ' ' or 'e' }} {{ [0] or 'e' }}", "{}", "e e e   [0]"},
};
// clang-format on

KVLM_JINJA_RENDER_SUITE(JinjaOperators, kOperators);

KVLM_JINJA_RENDER_SUITE(JinjaAccess, kAccess);

KVLM_JINJA_RENDER_SUITE(JinjaUndefined, kUndefined);

KVLM_JINJA_RENDER_SUITE(JinjaPrinting, kPrinting);

// Runtime errors: Jinja2 fails on these too; we name the line and column.
struct ErrorCase {
  const char* name;
  const char* source;
  const char* context;
  const char* message;
};

// clang-format off
const ErrorCase kRuntimeErrors[] = {
  // Jinja2's default Undefined: using it in arithmetic, calling it or taking
  // an attribute of it fails with the name that was missing.
  {"undefined_in_arithmetic", "{{ foo + 1 }}", "{}", "template error at line 1, column 8: 'foo' is undefined"},
  {"attribute_of_undefined", "\n  {{ foo.bar }}", "{}", "template error at line 2, column 10: 'foo' is undefined"},
  {"attribute_of_missing_attribute", "{{ a.b.c }}", R"J({"a": {}})J", "template error at line 1, column 8: 'dict object' has no attribute 'b'"},
  {"missing_element_in_arithmetic", "{{ [1, 2, 3][5] + 1 }}", "{}", "template error at line 1, column 17: 'list object' has no element 5"},
  {"calling_undefined", "{{ foo() }}", "{}", "template error at line 1, column 7: 'foo' is undefined"},
  {"calling_a_number", "{{ 5() }}", "{}", "template error at line 1, column 5: 'int' object is not callable"},
  {"int_plus_string", "{{ 1 + 'a' }}", "{}", "template error at line 1, column 6: unsupported operand type(s) for +: 'int' and 'str'"},
  {"string_plus_none", "{{ 'a' + none }}", "{}", "template error at line 1, column 8: can only concatenate str (not \"NoneType\") to str"},
  {"unorderable", "{{ 'a' < 1 }}", "{}", "template error at line 1, column 4: '<' not supported between instances of 'str' and 'int'"},
  {"division_by_zero", "{{ 1 / 0 }}", "{}", "template error at line 1, column 6: division by zero"},
  {"in_on_a_number", "{{ 5 in 5 }}", "{}", "template error at line 1, column 4: argument of type 'int' is not iterable"},
  {"unpack_mismatch", "{% for a, b in [[1, 2, 3]] %}{% endfor %}", "{}", "template error at line 1, column 1: too many values to unpack (expected 2)"},
  {"iterate_none", "{% for x in none %}{% endfor %}", "{}", "template error at line 1, column 13: 'NoneType' object is not iterable"},
  {"slice_step_zero", "{{ [1][::0] }}", "{}", "template error at line 1, column 7: slice step cannot be zero"},
  {"tojson_of_undefined", "{{ nothing|tojson }}", "{}", "template error at line 1, column 12: Object of type Undefined is not JSON serializable"},
};
// clang-format on

class JinjaRuntimeErrors : public ::testing::TestWithParam<ErrorCase> {};
TEST_P(JinjaRuntimeErrors, FailWithPosition) {
  EXPECT_EQ(error_of(GetParam().source, GetParam().context), GetParam().message);
}
INSTANTIATE_TEST_SUITE_P(Jinja, JinjaRuntimeErrors, ::testing::ValuesIn(kRuntimeErrors),
                         jinja_test::case_name<ErrorCase>);

TEST(JinjaExpr, IntegerOverflowIsAnErrorNotWraparound) {
  // Python ints are unbounded; ours are 64-bit and say so instead of wrapping.
  EXPECT_THROW(render("{{ 9223372036854775807 + 1 }}", "{}"), Error);
  EXPECT_EQ(render("{{ 9223372036854775807 - 1 }}", "{}"), "9223372036854775806");
}

TEST(JinjaExpr, VeryDeepValuesAreRefusedWhenPrinted) {
  // Python raises RecursionError here; we refuse instead of overflowing the stack.
  EXPECT_THROW(render("{% set ns = namespace(x=1) %}{% for i in range(5000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}", "{}"),
               Error);
}

TEST(JinjaExpr, RunawayRepetitionIsRefused) {
  EXPECT_THROW(render("{{ 'abc' * 1000000000 }}", "{}"), Error);
}

}  // namespace
}  // namespace kvlm
