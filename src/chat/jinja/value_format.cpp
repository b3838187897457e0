// Python's str() and repr() of values: {{ x }} prints str(x), and containers
// print their items with repr(), so a template printing a list or a dict
// (Mistral's `content|string`) gets exactly the characters Python would.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "chat/jinja/error.h"
#include "chat/jinja/utf8.h"
#include "chat/jinja/value.h"

namespace kvlm::jinja {

namespace {

// Code points repr() shows as an escape because str.isprintable() is false
// for them (controls, separators other than space, format characters).
bool is_unprintable(char32_t c) {
  if (c < 0x20 || c == 0x7F) return true;
  if (c >= 0x80 && c <= 0xA0) return true;
  if (c == 0xAD || c == 0x1680 || c == 0x3000 || c == 0xFEFF) return true;
  if (c >= 0x2000 && c <= 0x200F) return true;
  if (c >= 0x2028 && c <= 0x202F) return true;
  if (c >= 0x205F && c <= 0x2064) return true;
  if (c >= 0xD800 && c <= 0xDFFF) return true;  // escaped invalid bytes
  return false;
}

// Containers being printed, innermost last: a container met again inside
// itself prints as Python's recursion marker ([...], {...}), and very deep
// nesting is refused the way Python raises RecursionError.
struct ReprState {
  std::vector<const void*> active;
};
constexpr size_t kMaxReprDepth = 400;

std::string repr_of(const Value& v, ReprState& state);

std::string items_repr(const std::vector<Value>& items, ReprState& state) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ", ";
    out += repr_of(items[i], state);
  }
  return out;
}

std::string dict_repr(const DictObj& d, ReprState& state) {
  std::string out = "{";
  bool first = true;
  for (const auto& [key, value] : d.items()) {
    if (!first) out += ", ";
    first = false;
    out += repr_of(key, state);
    out += ": ";
    out += repr_of(value, state);
  }
  return out + "}";
}

std::string container_repr(const Value& v, ReprState& state) {
  const void* self = v.is_list() ? static_cast<const void*>(&v.list()) : static_cast<const void*>(&v.dict());
  bool namespace_like = v.is_dict() && v.dict().flavor() == DictFlavor::kNamespace;
  if (std::find(state.active.begin(), state.active.end(), self) != state.active.end()) {
    if (v.is_list()) return v.is_tuple() ? "(...)" : "[...]";
    return namespace_like ? "<Namespace {...}>" : "{...}";
  }
  if (state.active.size() >= kMaxReprDepth) throw_runtime("maximum recursion depth exceeded while getting the repr of an object");
  state.active.push_back(self);
  std::string out;
  if (v.is_list()) {
    const auto& l = v.list();
    out.push_back(l.is_tuple ? '(' : '[');
    out += items_repr(l.items, state);
    if (l.is_tuple && l.items.size() == 1) out.push_back(',');
    out.push_back(l.is_tuple ? ')' : ']');
  } else {
    out = dict_repr(v.dict(), state);
    if (namespace_like) out = fmt::format("<Namespace {}>", out);
  }
  state.active.pop_back();
  return out;
}

}  // namespace

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // Shortest round-trip digits, then Python's layout: positional notation when
  // the decimal exponent is in [-4, 16), scientific otherwise.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
  std::string out;
  if (sci.front() == '-') {
    out.push_back('-');
    sci.remove_prefix(1);
  }
  size_t e_pos = sci.find('e');
  std::string digits;
  for (char ch : sci.substr(0, e_pos)) {
    if (ch != '.') digits.push_back(ch);
  }
  int exp10 = std::stoi(std::string(sci.substr(e_pos + 1)));
  int decpt = exp10 + 1;  // digits d1 d2 ... mean 0.d1d2... x 10^decpt
  int num_digits = static_cast<int>(digits.size());
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
    } else if (decpt >= num_digits) {
      out += digits + std::string(static_cast<size_t>(decpt - num_digits), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
    }
  } else {
    out += digits.substr(0, 1);
    if (num_digits > 1) {
      out += '.';
      out += digits.substr(1);
    }
    out += fmt::format("e{}{:02d}", exp10 < 0 ? '-' : '+', std::abs(exp10));
  }
  return out;
}

std::string string_repr(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : decode_utf8(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c >= 0xDC80 && c <= 0xDCFF) {
      out += fmt::format("\\udc{:02x}", static_cast<unsigned>(c & 0xFF));
    } else if (is_unprintable(c)) {
      out += c <= 0xFF ? fmt::format("\\x{:02x}", static_cast<unsigned>(c))
                       : fmt::format("\\u{:04x}", static_cast<unsigned>(c));
    } else {
      append_utf8(out, c);
    }
  }
  out.push_back(quote);
  return out;
}

namespace {

std::string repr_of(const Value& v, ReprState& state) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "Undefined";
    case Value::Kind::kNone: return "None";
    case Value::Kind::kBool: return v.as_bool() ? "True" : "False";
    case Value::Kind::kInt: return std::to_string(v.as_int());
    case Value::Kind::kFloat: return float_repr(v.as_double());
    case Value::Kind::kString: return string_repr(v.as_string());
    case Value::Kind::kList: return container_repr(v, state);
    case Value::Kind::kDict:
      if (v.dict().flavor() == DictFlavor::kLoop) {
        const Value* index = v.dict().find_str("index");
        const Value* length = v.dict().find_str("length");
        return "<LoopContext " + (index ? to_str(*index) : "?") + "/" + (length ? to_str(*length) : "?") + ">";
      }
      return container_repr(v, state);
    case Value::Kind::kCallable: return v.callable().repr;
  }
  return "?";
}

}  // namespace

std::string to_repr(const Value& v) {
  ReprState state;
  return repr_of(v, state);
}

std::string to_str(const Value& v) {
  if (v.is_undefined()) return "";
  if (v.is_string()) return v.as_string();
  return to_repr(v);
}

}  // namespace kvlm::jinja
