// Name lookup for filters and tests, and argument binding for all builtins.
#include "chat/jinja/builtins.h"

#include <unordered_map>

#include "chat/jinja/error.h"

namespace kvlm::jinja {

namespace {

template <typename Entry>
auto index_of(std::initializer_list<std::span<const Entry>> tables) {
  std::unordered_map<std::string_view, decltype(Entry::fn)> index;
  for (auto table : tables) {
    for (const auto& entry : table) index.emplace(entry.name, entry.fn);
  }
  return index;
}

}  // namespace

FilterFn find_filter(std::string_view name) {
  static const auto index = index_of<FilterEntry>({text_filters(), sequence_filters()});
  auto it = index.find(name);
  return it == index.end() ? nullptr : it->second;
}

TestFn find_test(std::string_view name) {
  static const auto index = index_of<TestEntry>({builtin_tests()});
  auto it = index.find(name);
  return it == index.end() ? nullptr : it->second;
}

Value call_filter(std::string_view name, const Value& operand, CallArgs& args) {
  FilterFn fn = find_filter(name);
  if (fn == nullptr) throw_runtime("no filter named '{}'", name);
  return fn(operand, args);
}

bool call_test(std::string_view name, const Value& operand, CallArgs& args) {
  TestFn fn = find_test(name);
  if (fn == nullptr) throw_runtime("no test named '{}'", name);
  return fn(operand, args);
}

ArgBinder::ArgBinder(std::string_view fn, const CallArgs& args, std::initializer_list<std::string_view> params)
    : fn_(fn), names_(params), values_(params.size()), present_(params.size(), false) {
  if (args.args.size() > names_.size()) {
    throw_runtime("{}() takes at most {} argument(s) ({} given)", fn_, names_.size(), args.args.size());
  }
  for (size_t i = 0; i < args.args.size(); ++i) {
    values_[i] = args.args[i];
    present_[i] = true;
  }
  for (const auto& [name, value] : args.kwargs) {
    size_t i = 0;
    while (i < names_.size() && names_[i] != name) ++i;
    if (i == names_.size()) throw_runtime("{}() got an unexpected keyword argument '{}'", fn_, name);
    if (present_[i]) throw_runtime("{}() got multiple values for argument '{}'", fn_, name);
    values_[i] = value;
    present_[i] = true;
  }
}

int64_t ArgBinder::get_int(size_t i, int64_t fallback) const {
  if (!present_[i] || values_[i].is_none()) return fallback;
  if (!values_[i].is_int() && !values_[i].is_bool()) {
    throw_runtime("{}(): argument '{}' must be an integer, not {}", fn_, names_[i], values_[i].type_name());
  }
  return values_[i].as_int();
}

std::string ArgBinder::get_string(size_t i, std::string fallback) const {
  if (!present_[i] || values_[i].is_none()) return fallback;
  if (!values_[i].is_string()) {
    throw_runtime("{}(): argument '{}' must be a string, not {}", fn_, names_[i], values_[i].type_name());
  }
  return values_[i].as_string();
}

}  // namespace kvlm::jinja
