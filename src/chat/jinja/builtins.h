// The library a template can call: filters (x|trim), tests (x is defined),
// methods of builtin types (s.strip(), d.items()) and globals (range,
// namespace, raise_exception, strftime_now). Names and behaviour follow
// Jinja2 3.1 as Hugging Face configures it for chat templates, including its
// `tojson` (json.dumps with ensure_ascii=False, no HTML escaping).
#pragma once

#include <ctime>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/jinja/value.h"

namespace kvlm::jinja {

using FilterFn = Value (*)(const Value& operand, CallArgs& args);
using TestFn = bool (*)(const Value& operand, CallArgs& args);

// nullptr when no filter / test has that name.
FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);

// A bound method of a builtin type (str.strip, list.append, dict.get), or
// nullopt when the type has no such method.
std::optional<Value> find_method(const Value& obj, std::string_view name);
// The sandbox's refusal message when `name` is a method that would modify
// `obj` (list.append, dict.update ...), else nullopt. Such attributes read
// as undefined, and calling them fails with this message.
std::optional<std::string> unsafe_method(const Value& obj, std::string_view name);

// The global functions. `local_time` supplies the time strftime_now formats;
// every namespace() created is also appended to `namespaces`, so the caller
// can break reference cycles through them when the render ends.
std::vector<std::pair<std::string, Value>> make_globals(std::function<std::tm()> local_time,
                                                        std::vector<Value>* namespaces);

// --- helpers shared by the builtin files ---

// Binds a call's arguments to named parameters the way Python does:
// positionals in order, then keywords by name; unknown keywords, duplicates
// and surplus positionals throw RuntimeError naming `fn`.
class ArgBinder {
 public:
  ArgBinder(std::string_view fn, const CallArgs& args, std::initializer_list<std::string_view> params);
  bool has(size_t i) const { return present_[i]; }
  const Value& get(size_t i) const { return values_[i]; }  // undefined when absent
  Value get_or(size_t i, Value fallback) const { return present_[i] ? values_[i] : std::move(fallback); }
  int64_t get_int(size_t i, int64_t fallback) const;  // throws unless an int (or bool)
  bool get_bool(size_t i, bool fallback) const { return present_[i] ? values_[i].truthy() : fallback; }
  std::string get_string(size_t i, std::string fallback) const;  // throws unless a string

 private:
  std::string fn_;
  std::vector<std::string_view> names_;
  std::vector<Value> values_;
  std::vector<bool> present_;
};

// Applies the filter or test called `name` (for map('upper'), select('odd')).
Value call_filter(std::string_view name, const Value& operand, CallArgs& args);
bool call_test(std::string_view name, const Value& operand, CallArgs& args);

// --- the tables each builtin file contributes (builtins.cpp indexes them) ---

struct FilterEntry {
  std::string_view name;
  FilterFn fn;
};
struct TestEntry {
  std::string_view name;
  TestFn fn;
};
std::span<const FilterEntry> text_filters();      // filters_text.cpp
std::span<const FilterEntry> sequence_filters();  // filters_seq.cpp
std::span<const TestEntry> builtin_tests();       // tests.cpp

}  // namespace kvlm::jinja
