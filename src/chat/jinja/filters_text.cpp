// Filters over strings and numbers: trim, upper, replace, indent, int,
// round, tojson ... Each takes the value left of the `|` and the call's
// arguments, with Jinja2 3.1's parameter names and defaults.
#include <cmath>
#include <cstdlib>

#include "chat/jinja/builtins.h"
#include "chat/jinja/error.h"
#include "chat/jinja/format.h"
#include "chat/jinja/json.h"
#include "chat/jinja/strings.h"
#include "chat/jinja/utf8.h"

namespace kvlm::jinja {

namespace {

Value f_trim(const Value& v, CallArgs& args) {
  ArgBinder a("trim", args, {"chars"});
  std::optional<std::string> chars;
  if (a.has(0) && !a.get(0).is_none()) chars = a.get_string(0, "");
  return Value(py_strip(to_str(v), chars, true, true));
}

template <std::string (*F)(std::string_view)>
Value f_map_text(const Value& v, CallArgs& args) {
  ArgBinder a("filter", args, {});
  return Value(F(to_str(v)));
}

// Jinja's own title filter: words start after '-', whitespace or an opening
// bracket, so "it's" stays "It's" (unlike str.title()).
std::string jinja_title(std::string_view s) {
  std::u32string chars = decode_utf8(s);
  bool word_start = true;
  for (char32_t& c : chars) {
    bool boundary = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || is_py_space(c);
    if (boundary) {
      word_start = true;
      continue;
    }
    c = word_start ? to_upper(c) : to_lower(c);
    word_start = false;
  }
  return encode_utf8(chars);
}

Value f_replace(const Value& v, CallArgs& args) {
  ArgBinder a("replace", args, {"old", "new", "count"});
  return Value(py_replace(to_str(v), to_str(a.get(0)), to_str(a.get(1)), a.get_int(2, -1)));
}

Value f_center(const Value& v, CallArgs& args) {
  ArgBinder a("center", args, {"width"});
  return Value(py_justify(to_str(v), a.get_int(0, 80), " ", '^'));
}

Value f_escape(const Value& v, CallArgs& args) {
  ArgBinder a("escape", args, {});
  return Value(html_escape(to_str(v)));
}

Value f_string(const Value& v, CallArgs& args) {
  ArgBinder a("string", args, {});
  return Value(to_str(v));
}

Value f_safe(const Value& v, CallArgs& args) {
  ArgBinder a("safe", args, {});  // no autoescaping, so marking text safe changes nothing
  return Value(to_str(v));
}

Value f_format(const Value& v, CallArgs& args) {
  if (!args.args.empty() && !args.kwargs.empty()) throw_runtime("can't handle positional and keyword arguments at the same time");
  if (!args.kwargs.empty()) {
    Value mapping = Value::make_dict();
    for (auto& [k, x] : args.kwargs) mapping.dict().set(k, x);
    return Value(percent_format(to_str(v), mapping));
  }
  return Value(percent_format(to_str(v), Value::make_tuple(args.args)));
}

Value f_indent(const Value& v, CallArgs& args) {
  ArgBinder a("indent", args, {"width", "first", "blank"});
  std::string indent = a.has(0) && a.get(0).is_string() ? a.get(0).as_string()
                                                         : std::string(static_cast<size_t>(std::max<int64_t>(0, a.get_int(0, 4))), ' ');
  bool first = a.get_bool(1, false), blank = a.get_bool(2, false);
  // Jinja appends a newline before splitting, so a trailing newline survives.
  std::vector<std::string> lines = py_splitlines(to_str(v) + "\n", false);
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) {
      out += "\n";
      if (blank || !lines[i].empty()) out += indent;
    }
    out += lines[i];
  }
  if (first) out = indent + out;
  return Value(std::move(out));
}

// Python's float(str): surrounding whitespace allowed, underscores between digits.
std::optional<double> parse_float(std::string_view text) {
  std::string s = py_strip(text, std::nullopt, true, true);
  std::string clean;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      if (i == 0 || i + 1 == s.size() || !std::isdigit(static_cast<unsigned char>(s[i - 1])) ||
          !std::isdigit(static_cast<unsigned char>(s[i + 1]))) {
        return std::nullopt;
      }
      continue;
    }
    clean.push_back(s[i]);
  }
  if (clean.empty() || clean.find_first_of("xXpP") != std::string::npos) return std::nullopt;  // no hex floats
  char* end = nullptr;
  double d = std::strtod(clean.c_str(), &end);
  if (end != clean.c_str() + clean.size()) return std::nullopt;
  return d;
}

// Python's int(str, base): optional sign, optional 0x/0o/0b prefix matching the base.
std::optional<int64_t> parse_int(std::string_view text, int base) {
  std::string s = py_strip(text, std::nullopt, true, true);
  size_t i = 0;
  bool negative = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
  if (i + 1 < s.size() && s[i] == '0') {
    char p = static_cast<char>(s[i + 1] | 0x20);
    if ((p == 'x' && base == 16) || (p == 'o' && base == 8) || (p == 'b' && base == 2)) i += 2;
  }
  std::string digits;
  for (; i < s.size(); ++i) {
    if (s[i] == '_' && !digits.empty() && i + 1 < s.size() && s[i + 1] != '_') continue;
    digits.push_back(s[i]);
  }
  if (digits.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  long long value = std::strtoll(digits.c_str(), &end, base);
  if (end != digits.c_str() + digits.size() || errno == ERANGE || digits[0] == '+' || digits[0] == '-') return std::nullopt;
  return negative ? -value : value;
}

Value truncate_float(double d) {
  if (!std::isfinite(d)) throw_runtime("cannot convert float {} to integer", float_repr(d));
  if (std::fabs(d) >= 9.2e18) throw_runtime("integer overflow");
  return Value(static_cast<int64_t>(std::trunc(d)));
}

Value f_int(const Value& v, CallArgs& args) {
  ArgBinder a("int", args, {"default", "base"});
  Value fallback = a.get_or(0, Value(0));
  if (v.is_int()) return v;
  if (v.is_bool()) return Value(v.as_int());
  if (v.is_float()) return truncate_float(v.as_double());
  if (v.is_string()) {
    if (auto i = parse_int(v.as_string(), static_cast<int>(a.get_int(1, 10)))) return Value(*i);
    if (auto d = parse_float(v.as_string())) return truncate_float(*d);  // "42.23"|int is 42
  }
  return fallback;
}

Value f_float(const Value& v, CallArgs& args) {
  ArgBinder a("float", args, {"default"});
  if (v.is_number()) return Value(v.as_double());
  if (v.is_string()) {
    if (auto d = parse_float(v.as_string())) return Value(*d);
  }
  return a.get_or(0, Value(0.0));
}

Value f_abs(const Value& v, CallArgs& args) {
  ArgBinder a("abs", args, {});
  if (v.is_float()) return Value(std::fabs(v.as_double()));
  if (v.is_int() || v.is_bool()) {
    int64_t x = v.as_int();
    if (x == INT64_MIN) throw_runtime("integer overflow");
    return Value(x < 0 ? -x : x);
  }
  throw_runtime("bad operand type for abs(): '{}'", v.type_name());
}

Value f_round(const Value& v, CallArgs& args) {
  ArgBinder a("round", args, {"precision", "method"});
  int64_t precision = a.get_int(0, 0);
  std::string method = a.get_string(1, "common");
  if (method != "common" && method != "ceil" && method != "floor") throw_runtime("method must be common, ceil or floor");
  if (!v.is_number()) throw_runtime("type {} doesn't define __round__ method", v.type_name());
  if (precision < -300 || precision > 300) throw_runtime("round(): precision out of range");
  if (method == "common") {
    if (!v.is_float()) {
      if (precision >= 0) return Value(v.as_int());
      double scale = std::pow(10.0, static_cast<double>(-precision));
      return Value(static_cast<int64_t>(std::nearbyint(static_cast<double>(v.as_int()) / scale) * scale));
    }
    double d = v.as_double();
    if (!std::isfinite(d)) return Value(d);
    if (precision >= 0) {
      // printf rounds the exact binary value half-to-even, as Python's round() does.
      char buf[400];
      std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(precision), d);
      return Value(std::strtod(buf, nullptr));
    }
    double scale = std::pow(10.0, static_cast<double>(-precision));
    return Value(std::nearbyint(d / scale) * scale);
  }
  double scale = std::pow(10.0, static_cast<double>(precision));
  double x = v.as_double() * scale;
  return Value((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

Value f_truncate(const Value& v, CallArgs& args) {
  ArgBinder a("truncate", args, {"length", "killwords", "end", "leeway"});
  std::u32string s = decode_utf8(to_str(v));
  int64_t length = a.get_int(0, 255), leeway = a.get_int(3, 5);
  std::string end = a.get_string(2, "...");
  int64_t end_len = static_cast<int64_t>(utf8_length(end));
  if (length < end_len) throw_runtime("expected length >= {}, got {}", end_len, length);
  if (leeway < 0) throw_runtime("expected leeway >= 0, got {}", leeway);
  if (static_cast<int64_t>(s.size()) <= length + leeway) return Value(encode_utf8(s));
  std::string head = encode_utf8(s.substr(0, static_cast<size_t>(length - end_len)));
  if (a.get_bool(1, false)) return Value(head + end);
  size_t space = head.rfind(' ');
  return Value((space == std::string::npos ? head : head.substr(0, space)) + end);
}

Value f_wordcount(const Value& v, CallArgs& args) {
  ArgBinder a("wordcount", args, {});
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : decode_utf8(to_str(v))) {
    bool word = is_py_alpha(c) || is_py_digit(c) || c == '_';
    if (word && !in_word) ++n;
    in_word = word;
  }
  return Value(n);
}

// Hugging Face replaces Jinja's tojson with json.dumps(x, ensure_ascii=False,
// indent=None, separators=None, sort_keys=False), in that parameter order.
Value f_tojson(const Value& v, CallArgs& args) {
  ArgBinder a("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonDumpOptions opt;
  opt.ensure_ascii = a.get_bool(0, false);
  if (a.has(1) && !a.get(1).is_none()) {
    opt.indent = a.get(1).is_string() ? a.get(1).as_string()
                                      : std::string(static_cast<size_t>(std::max<int64_t>(0, a.get_int(1, 0))), ' ');
  }
  if (a.has(2) && !a.get(2).is_none()) {
    const Value& seps = a.get(2);
    if (!seps.is_list() || seps.list().items.size() != 2 || !seps.list().items[0].is_string() ||
        !seps.list().items[1].is_string()) {
      throw_runtime("tojson(): separators must be a pair of strings");
    }
    opt.item_separator = seps.list().items[0].as_string();
    opt.key_separator = seps.list().items[1].as_string();
  }
  opt.sort_keys = a.get_bool(3, false);
  return Value(json_dumps(v, opt));
}

constexpr FilterEntry kTextFilters[] = {
    {"trim", f_trim},
    {"upper", f_map_text<py_upper>},
    {"lower", f_map_text<py_lower>},
    {"capitalize", f_map_text<py_capitalize>},
    {"title", f_map_text<jinja_title>},
    {"replace", f_replace},
    {"center", f_center},
    {"e", f_escape},
    {"escape", f_escape},
    {"forceescape", f_escape},
    {"string", f_string},
    {"safe", f_safe},
    {"format", f_format},
    {"indent", f_indent},
    {"int", f_int},
    {"float", f_float},
    {"abs", f_abs},
    {"round", f_round},
    {"truncate", f_truncate},
    {"wordcount", f_wordcount},
    {"tojson", f_tojson},
};

}  // namespace

std::span<const FilterEntry> text_filters() { return kTextFilters; }

}  // namespace kvlm::jinja
