// Jinja builtins through ChatTemplate: filters, tests, methods of str / list
// / dict, and the globals (range, namespace, dict, joiner, raise_exception,
// strftime_now). Every expected string in the tables was produced by
// Python's Jinja2 3.1 configured as Hugging Face does, including HF's
// `tojson` (json.dumps with ensure_ascii=False and insertion-ordered keys).
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

constexpr const char* kList = R"J({"l": [{"role": "user", "n": 3, "name": "b"}, {"role": "assistant", "n": 1, "name": "A"}, {"x": 1, "n": 2, "name": "c"}]})J";

// clang-format off
const Case kTextFilters[] = {
  {"trim", "[{{ '  x \n'|trim }}][{{ 'xxaxx'|trim('x') }}]", "{}", "[x][a]"},
  {"case", "{{ 'aBc'|upper }} {{ 'aBc'|lower }} {{ 'hELLO wORLD'|capitalize }} {{ 'hello world-foo(bar'|title }} {{ \"they're\"|title }}", "{}", "ABC abc Hello world Hello World-Foo(Bar They're"},
  {"case_non_ascii", "{{ 'élan ÇA'|upper }} {{ 'ÉLAN'|lower }} {{ 'привет'|upper }}", "{}", "ÉLAN ÇA élan ПРИВЕТ"},
  {"replace", "{{ 'hello'|replace('l', 'L') }} {{ 'hello'|replace('l', 'L', 1) }}", "{}", "heLLo heLlo"},
  {"indent", "{{ 'a\nb\n\nc'|indent }}|{{ 'a\nb'|indent(2, true) }}|{{ 'a\n\nb'|indent(2, blank=true) }}|{{ 'x\ny'|indent('> ') }}", "{}", "a\n    b\n\n    c|  a\n  b|a\n  \n  b|x\n> y"},
  {"int_float", "{{ '3.7'|int }} {{ 'abc'|int }} {{ 'abc'|int(7) }} {{ '0x1A'|int(base=16) }} {{ true|int }} {{ none|int }} {{ ' 42 '|int }} {{ '1_000'|int }} {{ '3'|float }} {{ 'x'|float }} {{ '1e3'|float }} {{ 7|float }}", "{}", "3 0 7 26 1 0 42 1000 3.0 0.0 1000.0 7.0"},
  {"round", "{{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 5|round }} {{ 1.234|round(1, 'ceil') }} {{ 1.234|round(1, 'floor') }} {{ -1.5|round }}", "{}", "2.0 4.0 2.67 5 1.3 1.2 -2.0"},
  {"abs", "{{ -5|abs }} {{ -2.5|abs }}", "{}", "5 2.5"},
  {"string_and_format", "{{ 5|string }} {{ none|string }} {{ [1]|string }} {{ '%s, %s!'|format('Hello', 'World') }} {{ '%(a)s'|format(a=1) }}", "{}", "5 None [1] Hello, World! 1"},
  {"escape_always_escapes", "{{ '<a href=\"x\">&</a>'|e }} {{ \"'\"|escape }} {{ '<b>'|safe }}", "{}", "&lt;a href=&#34;x&#34;&gt;&amp;&lt;/a&gt; &#39; <b>"},
  {"center_wordcount_truncate", "[{{ 'x'|center(5) }}] {{ 'a b c d'|wordcount }} {{ 'hello world foo bar'|truncate(9) }} {{ 'hello world foo bar'|truncate(9, true) }} {{ 'short'|truncate(9) }}", "{}", "[  x  ] 4 hello... hello ... short"},
};

const Case kSequenceFilters[] = {
  {"length_count", "{{ 'héllo'|length }} {{ [1, 2]|count }} {{ {'a': 1}|length }}", "{}", "5 2 1"},
  {"join", "{{ [1, 2]|join(',') }} {{ ['a', 'b']|join }} {{ l|join(', ', attribute='name') }}", kList, "1,2 ab b, A, c"},
  {"map", "{{ l|map(attribute='n')|list }} {{ ['a', 'B']|map('upper')|join }} {{ l|map(attribute='role', default='?')|join(',') }} {{ ['1', '2']|map('int')|sum }}", kList, "[3, 1, 2] AB user,assistant,? 3"},
  {"selectattr_rejectattr", "{{ l|selectattr('role', 'equalto', 'user')|map(attribute='name')|list }} {{ l|rejectattr('role')|map(attribute='name')|list }} {{ l|selectattr('n', '>', 1)|map(attribute='n')|list }} {{ l|selectattr('role', 'defined')|list|length }}", kList, "['b'] ['c'] [3, 2] 2"},
  {"select_reject", "{{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3, 4]|reject('even')|list }} {{ [0, 1, none, '']|select|list }} {{ [1, 2, 3]|select('in', [2, 3])|list }} {{ ['a', 'b']|reject('equalto', 'a')|list }}", "{}", "[1, 3] [1, 3] [1] [2, 3] ['b']"},
  {"list_items_first_last", "{{ 'ab'|list }} {{ {'a': 1}|list }} {{ {'a': 1}|items|list }} {{ [1, 2, 3]|first }} {{ [1, 2, 3]|last }} [{{ []|first }}]", "{}", "['a', 'b'] ['a'] [('a', 1)] 1 3 []"},
  {"sort", "{{ [3, 1, 2]|sort }} {{ ['b', 'A', 'c']|sort }} {{ ['b', 'A', 'c']|sort(case_sensitive=true) }} {{ [3, 1, 2]|sort(reverse=true) }} {{ l|sort(attribute='n')|map(attribute='name')|join }} {{ l|sort(attribute='name')|map(attribute='name')|join }}", kList, "[1, 2, 3] ['A', 'b', 'c'] ['A', 'b', 'c'] [3, 2, 1] Acb Abc"},
  {"unique_reverse", "{{ ['a', 'A', 'b']|unique|list }} {{ [1, 2, 1]|unique|list }} {{ [1, 2]|reverse|list }} {{ 'abc'|reverse }}", "{}", "['a', 'b'] [1, 2] [2, 1] cba"},
  {"dictsort", "{{ d|dictsort }} {{ d|dictsort(true) }} {{ d|dictsort(by='value', reverse=true) }}", R"J({"d": {"b": 2, "a": 1, "C": 3}})J", "[('a', 1), ('b', 2), ('C', 3)] [('C', 3), ('a', 1), ('b', 2)] [('C', 3), ('b', 2), ('a', 1)]"},
  {"batch_sum_min_max", "{{ [1, 2, 3, 4, 5]|batch(2)|list }} {{ [1, 2, 3]|batch(2, 'x')|list }} {{ [1, 2, 3]|sum }} {{ l|sum(attribute='n') }} {{ [3, 1, 2]|max }} {{ [3, 1, 2]|min }} {{ ['b', 'A']|max }} {{ l|max(attribute='n') }}", kList,
   "[[1, 2], [3, 4], [5]] [[1, 2], [3, 'x']] 6 6 3 1 b {'role': 'user', 'n': 3, 'name': 'b'}"},
  {"attr_is_getattr_only", "[{{ {'a': 1}|attr('a') }}]", "{}", "[]"},
};

const Case kToJson[] = {
  {"python_json_dumps_layout", "{{ {'b': 1, 'a': [1, 2.5, none, true, '<é>']}|tojson }}", "{}", R"J({"b": 1, "a": [1, 2.5, null, true, "<é>"]})J"},
  {"indent", "{{ {'b': 1, 'a': [1, {}], 'c': []}|tojson(indent=2) }}", "{}", "{\n  \"b\": 1,\n  \"a\": [\n    1,\n    {}\n  ],\n  \"c\": []\n}"},
  {"ensure_ascii_is_the_first_argument", "{{ 'é'|tojson(true) }} {{ 'é\u2028\x7f\x01😀'|tojson(ensure_ascii=true) }} {{ 'é\x01😀'|tojson }}", "{}", R"J("\u00e9" "\u00e9\u2028\u007f\u0001\ud83d\ude00" "é\u0001😀")J"},
  {"sort_keys_and_separators", "{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }} {{ [1, {'k': 2}]|tojson(separators=(',', ':')) }}", "{}", R"J({"a": 2, "b": 1} [1,{"k":2}])J"},
  {"escapes_quotes_and_controls", "{{ 'q\"b\\\\s\n\t'|tojson }}", "{}", R"J("q\"b\\s\n\t")J"},
  {"keys_become_strings", "{{ {1: 2, none: 3, true: 4}|tojson }} {{ 1.0|tojson }} {{ 1e100|tojson }} {{ ('a', 'b')|tojson }}", "{}", R"J({"1": 4, "null": 3} 1.0 1e+100 ["a", "b"])J"},
  {"tool_schema_round_trip", "{{ tools[0]|tojson }}", R"J({"tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]})J",
   R"J({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}})J"},
};

const Case kTests[] = {
  {"types", "{{ 1 is number }} {{ true is number }} {{ 1.5 is integer }} {{ 1 is integer }} {{ true is integer }} {{ 1.5 is float }} {{ true is boolean }} {{ 0 is boolean }} {{ none is none }} {{ 'a' is string }}", "{}",
   "True True False True False True True False True True"},
  {"containers", "{{ {} is mapping }} {{ [] is mapping }} {{ 'a' is iterable }} {{ 1 is iterable }} {{ nothing is iterable }} {{ 'a' is sequence }} {{ {} is sequence }} {{ none is iterable }}", "{}", "True False True False True True True False"},
  {"callable", "{{ range is callable }} {{ 'a'.upper is callable }} {{ 1 is callable }}", "{}", "True True False"},
  {"numbers", "{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(2) }}", "{}", "True True True False"},
  {"comparisons", "{{ 'u' is equalto 'u' }} {{ 1 is eq 1.0 }} {{ 2 is ne 2 }} {{ 1 is lt 2 }} {{ 1 is gt 2 }} {{ 2 is ge 2 }} {{ 2 is le 1 }} {{ 'a' is in 'abc' }}", "{}", "True True False True False True False True"},
  {"truth_and_case", "{{ true is true }} {{ 1 is true }} {{ false is false }} {{ 'ab' is lower }} {{ 'AB' is upper }} {{ 'Ab' is lower }} {{ none is sameas none }}", "{}", "True False True True True False True"},
  {"negated", "{{ 'x' is not none }} {{ nothing is not defined }} {{ 1 is not string }}", "{}", "True True True"},
  {"names_of_filters_and_tests", "{{ 'upper' is filter }} {{ 'nope' is filter }} {{ 'odd' is test }}", "{}", "True False True"},
};

const Case kMethods[] = {
  {"strip_split", "[{{ s.strip() }}][{{ s.lstrip() }}][{{ s.rstrip() }}] {{ s.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a b c'.split(' ', 1) }} {{ 'a b c'.rsplit(' ', 1) }} {{ 'xxaxx'.strip('x') }}", R"J({"s": " Hello World "})J",
   "[Hello World][Hello World ][ Hello World] ['Hello', 'World'] ['a', 'b', '', 'c'] ['a', 'b c'] ['a b', 'c'] a"},
  {"think_split_idiom", "{{ c.split('</think>')[-1].lstrip('\n') }}|{{ c.split('</think>')[0].split('<think>')[-1].strip() }}", R"J({"c": "<think>\nreason\n</think>\n\nanswer"})J", "answer|reason"},
  {"affixes", "{{ 'abc'.startswith('a') }} {{ 'abc'.startswith(('x', 'a')) }} {{ 'abc'.endswith('bc') }} {{ 'abc'.startswith('b', 1) }} {{ 'pre_x'.removeprefix('pre_') }} {{ 'x.py'.removesuffix('.py') }}", "{}", "True True True True x x"},
  {"case_methods", "{{ 'hello world'.title() }} {{ \"they're bill's\".title() }} {{ 'hELLO'.capitalize() }} {{ 'aBc'.swapcase() }} {{ 'Ab'.upper() }}{{ 'Ab'.lower() }}", "{}", "Hello World They'Re Bill'S Hello AbC ABab"},
  {"search", "{{ 'hello'.replace('l', 'L', 1) }} {{ 'ab'.replace('', '-') }} {{ 'abcabc'.find('c') }} {{ 'abcabc'.rfind('c') }} {{ 'héllo'.find('l') }} {{ 'x'.find('y') }} {{ 'aaa'.count('a') }}", "{}", "heLlo -a-b- 2 5 2 -1 3"},
  {"join_pad_predicates", "{{ '-'.join(['a', 'b']) }} {{ 'x'.center(5, '*') }} {{ 'ab'.ljust(4) }}| {{ 'ab'.rjust(4, '0') }} {{ '42'.zfill(5) }} {{ 'a1'.isalnum() }} {{ '12'.isdigit() }} {{ ' '.isspace() }} {{ 'AB'.isupper() }} {{ 'ab'.isalpha() }}", "{}",
   "a-b **x** ab  | 00ab 00042 True True True True True"},
  {"partition_splitlines", "{{ 'a.b.c'.partition('.') }} {{ 'a.b.c'.rpartition('.') }} {{ 'a\nb\r\nc'.splitlines() }}", "{}", "('a', '.', 'b.c') ('a.b', '.', 'c') ['a', 'b', 'c']"},
  {"format_method", "{{ '{}-{}'.format(1, 2) }} {{ '{name}-{0}'.format('p', name='n') }} {{ '{:>5}|{:<4}|{:^7}|{:.2f}|{!r}'.format('a', 'b', 'c', 3.14159, 'd') }} {{ '{0[k]}'.format({'k': 'v'}) }}", "{}",
   "1-2 n-p     a|b   |   c   |3.14|'d' v"},
  {"dict_methods", "{{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 0) }} {{ d.keys()|list }} {{ d.values()|list }} {{ d.items()|list }}", R"J({"d": {"a": 1, "b": 2}})J", "1 None 0 ['a', 'b'] [1, 2] [('a', 1), ('b', 2)]"},
  {"list_methods", "{{ [1, 2, 1].count(1) }} {{ [1, 2, 3].index(2) }} {{ (1, 2).index(2) }}", "{}", "2 1 1"},
};

const Case kGlobals[] = {
  {"range", "{{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(5, 0, -2)|list }} {{ range(0)|list }}", "{}", "[0, 1, 2] [1, 4, 7] [5, 3, 1] []"},
  {"namespace_and_dict", "{{ namespace(a=1).a }} {{ dict(a=1, b=2) }} {{ dict({'z': 1}, y=2) }}", "{}", "1 {'a': 1, 'b': 2} {'z': 1, 'y': 2}"},
  {"joiner", "{% set j = joiner('|') %}{% for i in range(3) %}{{ j() }}{{ i }}{% endfor %}", "{}", "0|1|2"},
};
// clang-format on

KVLM_JINJA_RENDER_SUITE(JinjaTextFilters, kTextFilters);

KVLM_JINJA_RENDER_SUITE(JinjaSequenceFilters, kSequenceFilters);

KVLM_JINJA_RENDER_SUITE(JinjaToJson, kToJson);

KVLM_JINJA_RENDER_SUITE(JinjaTests, kTests);

KVLM_JINJA_RENDER_SUITE(JinjaMethods, kMethods);

KVLM_JINJA_RENDER_SUITE(JinjaGlobals, kGlobals);

TEST(JinjaGlobals, RaiseExceptionMessageIsExactlyTheTemplates) {
  EXPECT_EQ(error_of("{{ raise_exception('Boom: ' ~ 42) }}"), "Boom: 42");
  EXPECT_EQ(error_of("text before\n{% if true %}{{ raise_exception(\"Conversation roles must alternate\") }}{% endif %}"),
            "Conversation roles must alternate");
}

TEST(JinjaGlobals, RangeIsBoundedLikeTheSandbox) {
  EXPECT_EQ(error_of("{{ range(200000)|length }}"),
            "template error at line 1, column 9: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
}

TEST(JinjaFilters, BadArgumentsAreErrors) {
  EXPECT_EQ(error_of("{{ [1]|join(1, 2, 3) }}"), "template error at line 1, column 8: join() takes at most 2 argument(s) (3 given)");
  EXPECT_EQ(error_of("{{ 'x'|trim(nope=1) }}"), "template error at line 1, column 8: trim() got an unexpected keyword argument 'nope'");
  EXPECT_EQ(error_of("{{ 1|round(1, 'bad') }}"), "template error at line 1, column 6: method must be common, ceil or floor");
  EXPECT_EQ(error_of("{{ 'x'.split('') }}"), "template error at line 1, column 13: empty separator");
  EXPECT_EQ(error_of("{{ {'a': 1}|items|tojson }}|{{ none|items }}"), "template error at line 1, column 37: Can only get item pairs from a mapping.");
}

}  // namespace
}  // namespace kvlm
