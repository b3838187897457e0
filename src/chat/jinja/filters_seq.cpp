// Filters over sequences and mappings: join, map, select*, reject*, sort,
// unique, first, last, items, default ... Where Jinja2 returns a generator
// (map, select, reverse) we return a list, which prints and iterates the same
// once a template applies |list or loops over it.
#include <algorithm>

#include "chat/jinja/builtins.h"
#include "chat/jinja/error.h"
#include "chat/jinja/operators.h"
#include "chat/jinja/strings.h"
#include "chat/jinja/utf8.h"

namespace kvlm::jinja {

namespace {

// Jinja's ignore_case: strings compare lowercased unless case_sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  return !case_sensitive && v.is_string() ? Value(py_lower(v.as_string())) : v;
}

Value attribute_or_self(const Value& item, const ArgBinder& a, size_t i) {
  if (!a.has(i) || a.get(i).is_none()) return item;
  if (a.get(i).is_int()) return get_item(item, a.get(i));
  return get_attr_path(item, to_str(a.get(i)));
}

Value f_length(const Value& v, CallArgs& args) {
  ArgBinder a("length", args, {});
  return Value(static_cast<int64_t>(length_of(v)));
}

Value f_default(const Value& v, CallArgs& args) {
  ArgBinder a("default", args, {"default_value", "boolean"});
  bool use_default = v.is_undefined() || (a.get_bool(1, false) && !v.truthy());
  return use_default ? a.get_or(0, Value("")) : v;
}

Value f_list(const Value& v, CallArgs& args) {
  ArgBinder a("list", args, {});
  return Value::make_list(iterate(v));
}

Value f_items(const Value& v, CallArgs& args) {
  ArgBinder a("items", args, {});
  if (v.is_undefined()) return Value::make_list();
  if (!v.is_mapping()) throw_runtime("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, x] : v.dict().items()) out.push_back(Value::make_tuple({k, x}));
  return Value::make_list(std::move(out));
}

Value f_first(const Value& v, CallArgs& args) {
  ArgBinder a("first", args, {});
  std::vector<Value> items = iterate(v);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value f_last(const Value& v, CallArgs& args) {
  ArgBinder a("last", args, {});
  std::vector<Value> items = iterate(v);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value f_join(const Value& v, CallArgs& args) {
  ArgBinder a("join", args, {"d", "attribute"});
  std::string sep = to_str(a.get_or(0, Value("")));
  std::string out;
  std::vector<Value> items = iterate(v);
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += sep;
    out += to_str(attribute_or_self(items[i], a, 1));
  }
  return Value(std::move(out));
}

Value f_reverse(const Value& v, CallArgs& args) {
  ArgBinder a("reverse", args, {});
  if (v.is_string()) {
    std::u32string chars = decode_utf8(v.as_string());
    std::reverse(chars.begin(), chars.end());
    return Value(encode_utf8(chars));
  }
  std::vector<Value> items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::make_list(std::move(items));
}

// Python getattr only: unlike `x.name`, a dict's keys are not attributes here.
Value f_attr(const Value& v, CallArgs& args) {
  ArgBinder a("attr", args, {"name"});
  std::string name = to_str(a.get(0));
  if (v.is_dict() && !v.is_mapping()) return get_attr(v, name);  // namespace / loop attributes
  if (auto method = find_method(v, name)) return *method;
  return Value::undefined(fmt::format("'{} object' has no attribute '{}'", v.type_name(), name));
}

Value f_batch(const Value& v, CallArgs& args) {
  ArgBinder a("batch", args, {"linecount", "fill_with"});
  int64_t n = a.get_int(0, 0);
  if (n <= 0) throw_runtime("batch(): linecount must be positive");
  std::vector<Value> out, row;
  for (auto& item : iterate(v)) {
    if (static_cast<int64_t>(row.size()) == n) out.push_back(Value::make_list(std::exchange(row, {})));
    row.push_back(std::move(item));
  }
  if (!row.empty()) {
    if (a.has(1) && !a.get(1).is_none()) {
      while (static_cast<int64_t>(row.size()) < n) row.push_back(a.get(1));
    }
    out.push_back(Value::make_list(std::move(row)));
  }
  return Value::make_list(std::move(out));
}

// map(attribute='x', default=d) or map('filter', args...).
Value f_map(const Value& v, CallArgs& args) {
  std::vector<Value> items = iterate(v);
  std::vector<Value> out;
  if (args.args.empty()) {
    ArgBinder a("map", args, {"attribute", "default"});
    if (!a.has(0)) throw_runtime("map(): expected a filter name or attribute=");
    for (const auto& item : items) {
      Value x = attribute_or_self(item, a, 0);
      out.push_back(x.is_undefined() && a.has(1) ? a.get(1) : x);
    }
    return Value::make_list(std::move(out));
  }
  std::string name = to_str(args.args[0]);
  CallArgs rest{std::vector<Value>(args.args.begin() + 1, args.args.end()), args.kwargs};
  for (const auto& item : items) {
    CallArgs call = rest;
    out.push_back(call_filter(name, item, call));
  }
  return Value::make_list(std::move(out));
}

// select / reject / selectattr / rejectattr share one loop: an optional
// attribute, then an optional test name and its arguments.
template <bool kAttr, bool kKeep>
Value f_select(const Value& v, CallArgs& args) {
  size_t next = 0;
  std::string attr;
  if (kAttr) {
    if (args.args.empty()) throw_runtime("{}(): missing attribute name", kKeep ? "selectattr" : "rejectattr");
    attr = to_str(args.args[next++]);
  }
  std::optional<std::string> test;
  if (next < args.args.size()) test = to_str(args.args[next++]);
  CallArgs test_args{std::vector<Value>(args.args.begin() + static_cast<ptrdiff_t>(next), args.args.end()), args.kwargs};
  std::vector<Value> out;
  for (auto& item : iterate(v)) {
    Value x = kAttr ? get_attr_path(item, attr) : item;
    bool pass = false;
    if (test) {
      CallArgs call = test_args;
      pass = call_test(*test, x, call);
    } else {
      pass = x.truthy();
    }
    if (pass == kKeep) out.push_back(std::move(item));
  }
  return Value::make_list(std::move(out));
}

Value f_sort(const Value& v, CallArgs& args) {
  ArgBinder a("sort", args, {"reverse", "case_sensitive", "attribute"});
  bool reverse = a.get_bool(0, false), case_sensitive = a.get_bool(1, false);
  std::vector<Value> items = iterate(v);
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& item : items) keyed.emplace_back(sort_key(attribute_or_self(item, a, 2), case_sensitive), item);
  std::stable_sort(keyed.begin(), keyed.end(), [reverse](const auto& x, const auto& y) {
    return reverse ? compare_values(y.first, x.first, "<") < 0 : compare_values(x.first, y.first, "<") < 0;
  });
  std::vector<Value> out;
  for (auto& [key, item] : keyed) out.push_back(std::move(item));
  return Value::make_list(std::move(out));
}

Value f_dictsort(const Value& v, CallArgs& args) {
  ArgBinder a("dictsort", args, {"case_sensitive", "by", "reverse"});
  if (!v.is_mapping()) throw_runtime("dictsort(): expected a mapping, got {}", v.type_name());
  bool case_sensitive = a.get_bool(0, false), reverse = a.get_bool(2, false);
  std::string by = a.get_string(1, "key");
  if (by != "key" && by != "value") throw_runtime("You can only sort by either \"key\" or \"value\"");
  std::vector<std::pair<Value, Value>> items(v.dict().items());
  std::stable_sort(items.begin(), items.end(), [&](const auto& x, const auto& y) {
    Value kx = sort_key(by == "key" ? x.first : x.second, case_sensitive);
    Value ky = sort_key(by == "key" ? y.first : y.second, case_sensitive);
    return reverse ? compare_values(ky, kx, "<") < 0 : compare_values(kx, ky, "<") < 0;
  });
  std::vector<Value> out;
  for (auto& [k, x] : items) out.push_back(Value::make_tuple({k, x}));
  return Value::make_list(std::move(out));
}

Value f_unique(const Value& v, CallArgs& args) {
  ArgBinder a("unique", args, {"case_sensitive", "attribute"});
  bool case_sensitive = a.get_bool(0, false);
  std::vector<Value> seen, out;
  for (auto& item : iterate(v)) {
    Value key = sort_key(attribute_or_self(item, a, 1), case_sensitive);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return values_equal(s, key); })) continue;
    seen.push_back(std::move(key));
    out.push_back(std::move(item));
  }
  return Value::make_list(std::move(out));
}

template <bool kMax>
Value f_minmax(const Value& v, CallArgs& args) {
  ArgBinder a(kMax ? "max" : "min", args, {"case_sensitive", "attribute"});
  bool case_sensitive = a.get_bool(0, false);
  std::optional<Value> best, best_key;
  for (auto& item : iterate(v)) {
    Value key = sort_key(attribute_or_self(item, a, 1), case_sensitive);
    int c = best_key ? compare_values(key, *best_key, kMax ? ">" : "<") : 0;
    if (!best || (kMax ? c > 0 : c < 0)) {
      best = item;
      best_key = key;
    }
  }
  return best ? *best : Value::undefined("No aggregated item, sequence was empty.");
}

Value f_sum(const Value& v, CallArgs& args) {
  ArgBinder a("sum", args, {"attribute", "start"});
  Value total = a.get_or(1, Value(0));
  for (auto& item : iterate(v)) total = binary_op(BinaryOp::kAdd, total, attribute_or_self(item, a, 0));
  return total;
}

constexpr FilterEntry kSequenceFilters[] = {
    {"length", f_length},
    {"count", f_length},
    {"default", f_default},
    {"d", f_default},
    {"list", f_list},
    {"items", f_items},
    {"first", f_first},
    {"last", f_last},
    {"join", f_join},
    {"reverse", f_reverse},
    {"attr", f_attr},
    {"batch", f_batch},
    {"map", f_map},
    {"select", f_select<false, true>},
    {"reject", f_select<false, false>},
    {"selectattr", f_select<true, true>},
    {"rejectattr", f_select<true, false>},
    {"sort", f_sort},
    {"dictsort", f_dictsort},
    {"unique", f_unique},
    {"max", f_minmax<true>},
    {"min", f_minmax<false>},
    {"sum", f_sum},
};

}  // namespace

std::span<const FilterEntry> sequence_filters() { return kSequenceFilters; }

}  // namespace kvlm::jinja
