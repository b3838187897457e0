// Jinja tests (`x is defined`, `n is divisibleby 3`, `r is equalto 'user'`),
// with Jinja2's answers for the edge cases: bool is a number, undefined is
// iterable, strings are sequences and iterables.
#include "chat/jinja/builtins.h"
#include "chat/jinja/error.h"
#include "chat/jinja/operators.h"
#include "chat/jinja/utf8.h"

namespace kvlm::jinja {

namespace {

template <bool (*Pred)(const Value&)>
bool unary_test(const Value& v, CallArgs& args) {
  ArgBinder a("test", args, {});
  return Pred(v);
}

bool is_defined(const Value& v) { return !v.is_undefined(); }
bool is_undefined(const Value& v) { return v.is_undefined(); }
bool is_none(const Value& v) { return v.is_none(); }
bool is_boolean(const Value& v) { return v.is_bool(); }
bool is_true(const Value& v) { return v.is_bool() && v.as_bool(); }
bool is_false(const Value& v) { return v.is_bool() && !v.as_bool(); }
bool is_integer(const Value& v) { return v.is_int(); }
bool is_float(const Value& v) { return v.is_float(); }
bool is_number(const Value& v) { return v.is_number(); }
bool is_string(const Value& v) { return v.is_string(); }
bool is_mapping(const Value& v) { return v.is_mapping(); }
bool is_callable(const Value& v) { return v.is_callable(); }
bool is_escaped(const Value&) { return false; }  // no Markup values without autoescaping
bool is_iterable(const Value& v) {
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_mapping() ||
         (v.is_dict() && v.dict().flavor() == DictFlavor::kLoop);
}
bool is_sequence(const Value& v) { return v.is_undefined() || v.is_string() || v.is_list() || v.is_mapping(); }

template <bool kUpper>
bool case_test(const Value& v, CallArgs& args) {
  ArgBinder a(kUpper ? "upper" : "lower", args, {});
  if (!v.is_string()) return false;
  bool any_cased = false;
  for (char32_t c : decode_utf8(v.as_string())) {
    if (is_upper(c) || is_lower(c)) {
      any_cased = true;
      if (kUpper ? is_lower(c) : is_upper(c)) return false;
    }
  }
  return any_cased;
}

bool parity(const Value& v, int want) {
  if (v.is_undefined()) v.fail_undefined();
  return binary_op(BinaryOp::kMod, v, Value(2)).truthy() == (want == 1);
}
bool t_odd(const Value& v, CallArgs& args) {
  ArgBinder a("odd", args, {});
  return parity(v, 1);
}
bool t_even(const Value& v, CallArgs& args) {
  ArgBinder a("even", args, {});
  return parity(v, 0);
}
bool t_divisibleby(const Value& v, CallArgs& args) {
  ArgBinder a("divisibleby", args, {"num"});
  return !binary_op(BinaryOp::kMod, v, a.get(0)).truthy();
}

enum class Cmp { kEq, kNe, kLt, kLe, kGt, kGe };
template <Cmp kOp>
bool compare_test(const Value& v, CallArgs& args) {
  ArgBinder a("compare", args, {"other"});
  const Value& other = a.get(0);
  switch (kOp) {
    case Cmp::kEq: return values_equal(v, other);
    case Cmp::kNe: return !values_equal(v, other);
    case Cmp::kLt: return compare_values(v, other, "<") < 0;
    case Cmp::kLe: return compare_values(v, other, "<=") <= 0;
    case Cmp::kGt: return compare_values(v, other, ">") > 0;
    case Cmp::kGe: return compare_values(v, other, ">=") >= 0;
  }
  return false;
}

bool t_in(const Value& v, CallArgs& args) {
  ArgBinder a("in", args, {"seq"});
  return contains(a.get(0), v);
}

// Python's `is`: scalars by value (None, True and small ints are singletons),
// containers and functions by identity.
bool t_sameas(const Value& v, CallArgs& args) {
  ArgBinder a("sameas", args, {"other"});
  const Value& o = a.get(0);
  if (v.kind() != o.kind()) return false;
  switch (v.kind()) {
    case Value::Kind::kList: return &v.list() == &o.list();
    case Value::Kind::kDict: return &v.dict() == &o.dict();
    case Value::Kind::kCallable: return &v.callable() == &o.callable();
    default: return values_equal(v, o);
  }
}

bool t_filter(const Value& v, CallArgs& args) {
  ArgBinder a("filter", args, {});
  return v.is_string() && find_filter(v.as_string()) != nullptr;
}
bool t_test(const Value& v, CallArgs& args) {
  ArgBinder a("test", args, {});
  return v.is_string() && find_test(v.as_string()) != nullptr;
}

constexpr TestEntry kTests[] = {
    {"defined", unary_test<is_defined>},
    {"undefined", unary_test<is_undefined>},
    {"none", unary_test<is_none>},
    {"boolean", unary_test<is_boolean>},
    {"true", unary_test<is_true>},
    {"false", unary_test<is_false>},
    {"integer", unary_test<is_integer>},
    {"float", unary_test<is_float>},
    {"number", unary_test<is_number>},
    {"string", unary_test<is_string>},
    {"mapping", unary_test<is_mapping>},
    {"iterable", unary_test<is_iterable>},
    {"sequence", unary_test<is_sequence>},
    {"callable", unary_test<is_callable>},
    {"escaped", unary_test<is_escaped>},
    {"lower", case_test<false>},
    {"upper", case_test<true>},
    {"odd", t_odd},
    {"even", t_even},
    {"divisibleby", t_divisibleby},
    {"eq", compare_test<Cmp::kEq>},
    {"equalto", compare_test<Cmp::kEq>},
    {"==", compare_test<Cmp::kEq>},
    {"ne", compare_test<Cmp::kNe>},
    {"!=", compare_test<Cmp::kNe>},
    {"lt", compare_test<Cmp::kLt>},
    {"lessthan", compare_test<Cmp::kLt>},
    {"<", compare_test<Cmp::kLt>},
    {"le", compare_test<Cmp::kLe>},
    {"<=", compare_test<Cmp::kLe>},
    {"gt", compare_test<Cmp::kGt>},
    {"greaterthan", compare_test<Cmp::kGt>},
    {">", compare_test<Cmp::kGt>},
    {"ge", compare_test<Cmp::kGe>},
    {">=", compare_test<Cmp::kGe>},
    {"in", t_in},
    {"sameas", t_sameas},
    {"filter", t_filter},
    {"test", t_test},
};

}  // namespace

std::span<const TestEntry> builtin_tests() { return kTests; }

}  // namespace kvlm::jinja
