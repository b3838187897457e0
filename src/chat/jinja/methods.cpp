// Methods of the builtin types, bound to their receiver: s.strip(),
// s.split(','), d.items(), d.get('k', x). Python's names, arguments and
// results; the methods that would modify a list or dict are refused as
// Hugging Face's sandbox refuses them.
#include <algorithm>

#include "chat/jinja/builtins.h"
#include "chat/jinja/error.h"
#include "chat/jinja/format.h"
#include "chat/jinja/operators.h"
#include "chat/jinja/strings.h"
#include "chat/jinja/utf8.h"

namespace kvlm::jinja {

namespace {

using Method = Value (*)(const Value& self, CallArgs& args);

std::optional<std::string> opt_string(const ArgBinder& a, size_t i, std::string_view fn) {
  if (!a.has(i) || a.get(i).is_none()) return std::nullopt;
  if (!a.get(i).is_string()) throw_runtime("{}() argument must be str or None, not {}", fn, a.get(i).type_name());
  return a.get(i).as_string();
}

Value string_list(std::vector<std::string> parts) {
  std::vector<Value> out;
  out.reserve(parts.size());
  for (auto& p : parts) out.emplace_back(std::move(p));
  return Value::make_list(std::move(out));
}

template <bool kLeft, bool kRight>
Value str_strip(const Value& self, CallArgs& args) {
  ArgBinder a("strip", args, {"chars"});
  return Value(py_strip(self.as_string(), opt_string(a, 0, "strip"), kLeft, kRight));
}

template <bool kFromRight>
Value str_split(const Value& self, CallArgs& args) {
  ArgBinder a("split", args, {"sep", "maxsplit"});
  auto sep = opt_string(a, 0, "split");
  int64_t maxsplit = a.get_int(1, -1);
  return string_list(kFromRight ? py_rsplit(self.as_string(), sep, maxsplit) : py_split(self.as_string(), sep, maxsplit));
}

Value str_splitlines(const Value& self, CallArgs& args) {
  ArgBinder a("splitlines", args, {"keepends"});
  return string_list(py_splitlines(self.as_string(), a.get_bool(0, false)));
}

// startswith / endswith take a prefix or a tuple of prefixes, and an optional
// start/end that slice the string first.
template <bool kEnds>
Value str_affix(const Value& self, CallArgs& args) {
  ArgBinder a(kEnds ? "endswith" : "startswith", args, {"prefix", "start", "end"});
  if (!a.has(0)) throw_runtime("{}() takes at least 1 argument (0 given)", kEnds ? "endswith" : "startswith");
  std::string s = self.as_string();
  if (a.has(1) || a.has(2)) {
    auto bound = [&](size_t i) -> std::optional<int64_t> {
      if (!a.has(i) || a.get(i).is_none()) return std::nullopt;
      return a.get_int(i, 0);
    };
    s = get_slice(self, bound(1), bound(2), std::nullopt).as_string();
  }
  std::vector<Value> affixes = a.get(0).is_tuple() ? a.get(0).list().items : std::vector<Value>{a.get(0)};
  for (const auto& affix : affixes) {
    if (!affix.is_string()) throw_runtime("{} first arg must be str or a tuple of str, not {}", kEnds ? "endswith" : "startswith", affix.type_name());
    const std::string& x = affix.as_string();
    bool hit = kEnds ? (s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0) : s.rfind(x, 0) == 0;
    if (hit) return Value(true);
  }
  return Value(false);
}

template <std::string (*F)(std::string_view)>
Value str_map(const Value& self, CallArgs& args) {
  ArgBinder a("method", args, {});
  return Value(F(self.as_string()));
}

Value str_replace(const Value& self, CallArgs& args) {
  ArgBinder a("replace", args, {"old", "new", "count"});
  if (!a.get(0).is_string() || !a.get(1).is_string()) throw_runtime("replace() arguments must be str");
  return Value(py_replace(self.as_string(), a.get(0).as_string(), a.get(1).as_string(), a.get_int(2, -1)));
}

template <bool kFromRight, bool kRaise>
Value str_find(const Value& self, CallArgs& args) {
  ArgBinder a("find", args, {"sub"});
  if (!a.get(0).is_string()) throw_runtime("must be str, not {}", a.get(0).type_name());
  int64_t i = py_find(self.as_string(), a.get(0).as_string(), kFromRight);
  if (kRaise && i < 0) throw_runtime("substring not found");
  return Value(i);
}

Value str_count(const Value& self, CallArgs& args) {
  ArgBinder a("count", args, {"sub"});
  if (!a.get(0).is_string()) throw_runtime("must be str, not {}", a.get(0).type_name());
  const std::string& s = self.as_string();
  const std::string& sub = a.get(0).as_string();
  if (sub.empty()) return Value(static_cast<int64_t>(utf8_length(s) + 1));
  int64_t n = 0;
  for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
  return Value(n);
}

Value str_join(const Value& self, CallArgs& args) {
  ArgBinder a("join", args, {"iterable"});
  std::string out;
  std::vector<Value> items = iterate(a.get(0));
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].is_string()) throw_runtime("sequence item {}: expected str instance, {} found", i, items[i].type_name());
    if (i > 0) out += self.as_string();
    out += items[i].as_string();
  }
  return Value(std::move(out));
}

Value str_format_method(const Value& self, CallArgs& args) { return Value(str_format(self.as_string(), args)); }

template <bool (*Pred)(char32_t)>
Value str_is(const Value& self, CallArgs& args) {
  ArgBinder a("is", args, {});
  std::u32string chars = decode_utf8(self.as_string());
  return Value(!chars.empty() && std::all_of(chars.begin(), chars.end(), Pred));
}

bool is_alnum(char32_t c) { return is_py_alpha(c) || is_py_digit(c); }

template <bool kUpper>
Value str_is_case(const Value& self, CallArgs& args) {
  ArgBinder a("is", args, {});
  bool any_cased = false;
  for (char32_t c : decode_utf8(self.as_string())) {
    if (is_upper(c) || is_lower(c)) {
      any_cased = true;
      if (kUpper ? is_lower(c) : is_upper(c)) return Value(false);
    }
  }
  return Value(any_cased);
}

template <bool kSuffix>
Value str_remove_affix(const Value& self, CallArgs& args) {
  ArgBinder a(kSuffix ? "removesuffix" : "removeprefix", args, {"affix"});
  if (!a.get(0).is_string()) throw_runtime("argument must be str, not {}", a.get(0).type_name());
  const std::string& s = self.as_string();
  const std::string& x = a.get(0).as_string();
  if (kSuffix && s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0) return Value(s.substr(0, s.size() - x.size()));
  if (!kSuffix && s.rfind(x, 0) == 0) return Value(s.substr(x.size()));
  return self;
}

template <bool kFromRight>
Value str_partition(const Value& self, CallArgs& args) {
  ArgBinder a("partition", args, {"sep"});
  if (!a.get(0).is_string() || a.get(0).as_string().empty()) throw_runtime("partition() needs a non-empty str separator");
  const std::string& s = self.as_string();
  const std::string& sep = a.get(0).as_string();
  size_t hit = kFromRight ? s.rfind(sep) : s.find(sep);
  if (hit == std::string::npos) {
    return kFromRight ? Value::make_tuple({Value(""), Value(""), self}) : Value::make_tuple({self, Value(""), Value("")});
  }
  return Value::make_tuple({Value(s.substr(0, hit)), Value(sep), Value(s.substr(hit + sep.size()))});
}

template <char kAlign>
Value str_justify(const Value& self, CallArgs& args) {
  ArgBinder a("justify", args, {"width", "fillchar"});
  std::string fill = a.get_string(1, " ");
  if (utf8_length(fill) != 1) throw_runtime("The fill character must be exactly one character long");
  return Value(py_justify(self.as_string(), a.get_int(0, 0), fill, kAlign));
}

Value str_zfill(const Value& self, CallArgs& args) {
  ArgBinder a("zfill", args, {"width"});
  std::string s = self.as_string();
  int64_t n = a.get_int(0, 0) - static_cast<int64_t>(utf8_length(s));
  if (n <= 0) return self;
  size_t sign = !s.empty() && (s[0] == '-' || s[0] == '+') ? 1 : 0;
  return Value(s.substr(0, sign) + std::string(static_cast<size_t>(n), '0') + s.substr(sign));
}

// ---- list / tuple ----

Value list_index(const Value& self, CallArgs& args) {
  ArgBinder a("index", args, {"value"});
  const auto& items = self.list().items;
  for (size_t i = 0; i < items.size(); ++i) {
    if (values_equal(items[i], a.get(0))) return Value(static_cast<int64_t>(i));
  }
  throw_runtime("{} is not in {}", to_repr(a.get(0)), self.type_name());
}

Value list_count(const Value& self, CallArgs& args) {
  ArgBinder a("count", args, {"value"});
  int64_t n = 0;
  for (const auto& item : self.list().items) n += values_equal(item, a.get(0)) ? 1 : 0;
  return Value(n);
}

Value list_copy(const Value& self, CallArgs& args) {
  ArgBinder a("copy", args, {});
  return Value::make_list(self.list().items);
}

// ---- dict ----

Value dict_get(const Value& self, CallArgs& args) {
  ArgBinder a("get", args, {"key", "default"});
  const Value* v = self.dict().find(a.get(0));
  return v ? *v : a.get_or(1, Value::none());
}

Value dict_items(const Value& self, CallArgs& args) {
  ArgBinder a("items", args, {});
  std::vector<Value> out;
  for (const auto& [k, v] : self.dict().items()) out.push_back(Value::make_tuple({k, v}));
  return Value::make_list(std::move(out));
}

Value dict_keys(const Value& self, CallArgs& args) {
  ArgBinder a("keys", args, {});
  return Value::make_list(iterate(self));
}

Value dict_values(const Value& self, CallArgs& args) {
  ArgBinder a("values", args, {});
  std::vector<Value> out;
  for (const auto& item : self.dict().items()) out.push_back(item.second);
  return Value::make_list(std::move(out));
}

Value dict_copy(const Value& self, CallArgs& args) {
  ArgBinder a("copy", args, {});
  Value out = Value::make_dict();
  for (const auto& [k, v] : self.dict().items()) out.dict().set(k, v);
  return out;
}

struct MethodEntry {
  std::string_view name;
  Method fn;
};

constexpr MethodEntry kStringMethods[] = {
    {"strip", str_strip<true, true>}, {"lstrip", str_strip<true, false>}, {"rstrip", str_strip<false, true>},
    {"split", str_split<false>}, {"rsplit", str_split<true>}, {"splitlines", str_splitlines},
    {"startswith", str_affix<false>}, {"endswith", str_affix<true>},
    {"upper", str_map<py_upper>}, {"lower", str_map<py_lower>}, {"title", str_map<py_title>},
    {"capitalize", str_map<py_capitalize>}, {"swapcase", str_map<py_swapcase>},
    {"replace", str_replace}, {"find", str_find<false, false>}, {"rfind", str_find<true, false>},
    {"index", str_find<false, true>}, {"rindex", str_find<true, true>}, {"count", str_count},
    {"join", str_join}, {"format", str_format_method},
    {"isdigit", str_is<is_py_digit>}, {"isdecimal", str_is<is_py_digit>}, {"isnumeric", str_is<is_py_digit>},
    {"isalpha", str_is<is_py_alpha>}, {"isalnum", str_is<is_alnum>}, {"isspace", str_is<is_py_space>},
    {"isupper", str_is_case<true>}, {"islower", str_is_case<false>},
    {"removeprefix", str_remove_affix<false>}, {"removesuffix", str_remove_affix<true>},
    {"partition", str_partition<false>}, {"rpartition", str_partition<true>},
    {"center", str_justify<'^'>}, {"ljust", str_justify<'<'>}, {"rjust", str_justify<'>'>}, {"zfill", str_zfill},
};

constexpr MethodEntry kListMethods[] = {{"index", list_index}, {"count", list_count}, {"copy", list_copy}};

constexpr MethodEntry kTupleMethods[] = {{"index", list_index}, {"count", list_count}};

constexpr MethodEntry kDictMethods[] = {
    {"get", dict_get}, {"items", dict_items}, {"keys", dict_keys}, {"values", dict_values},
    {"copy", dict_copy},
};

// Methods that change their receiver. Hugging Face renders templates in
// Jinja2's ImmutableSandboxedEnvironment, which hides these; so do we, and
// as a side effect values can only form reference cycles through
// namespace() objects, which the renderer breaks when it finishes.
constexpr std::string_view kUnsafeListMethods[] = {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"};
constexpr std::string_view kUnsafeDictMethods[] = {"clear", "pop", "popitem", "setdefault", "update"};

template <size_t N>
Method lookup(const MethodEntry (&table)[N], std::string_view name) {
  for (const auto& entry : table) {
    if (entry.name == name) return entry.fn;
  }
  return nullptr;
}

}  // namespace

std::optional<std::string> unsafe_method(const Value& obj, std::string_view name) {
  bool unsafe = false;
  if (obj.is_list() && !obj.is_tuple()) {
    unsafe = std::find(std::begin(kUnsafeListMethods), std::end(kUnsafeListMethods), name) != std::end(kUnsafeListMethods);
  } else if (obj.is_mapping()) {
    unsafe = std::find(std::begin(kUnsafeDictMethods), std::end(kUnsafeDictMethods), name) != std::end(kUnsafeDictMethods);
  }
  if (!unsafe) return std::nullopt;
  return fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, obj.type_name());
}

std::optional<Value> find_method(const Value& obj, std::string_view name) {
  Method fn = nullptr;
  if (obj.is_string()) fn = lookup(kStringMethods, name);
  else if (obj.is_tuple()) fn = lookup(kTupleMethods, name);
  else if (obj.is_list()) fn = lookup(kListMethods, name);
  else if (obj.is_mapping()) fn = lookup(kDictMethods, name);
  if (fn == nullptr) return std::nullopt;
  std::string type = obj.type_name();
  return Value::make_callable(std::string(name), [fn, obj](CallArgs& args) { return fn(obj, args); },
                         fmt::format("<built-in method {} of {} object>", name, type));
}

}  // namespace kvlm::jinja
