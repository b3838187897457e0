#include "chat/jinja/format.h"

#include <cmath>
#include <cstdio>

#include <fmt/format.h>

#include "chat/jinja/error.h"
#include "chat/jinja/operators.h"
#include "chat/jinja/utf8.h"

namespace kvlm::jinja {

namespace {

struct Spec {
  char fill = ' ';
  char align = 0;  // '<', '>', '^', '=' or 0 for the type's default
  char sign = '-';
  bool alt = false;
  bool zero = false;
  int width = -1;
  int precision = -1;
  char type = 0;
};

std::string pad(std::string body, const Spec& spec, char default_align) {
  size_t len = utf8_length(body);
  if (spec.width < 0 || len >= static_cast<size_t>(spec.width)) return body;
  size_t n = static_cast<size_t>(spec.width) - len;
  char align = spec.align ? spec.align : default_align;
  char fill = spec.zero && !spec.align ? '0' : spec.fill;
  if (align == '<') return body + std::string(n, fill);
  if (align == '^') return std::string(n / 2, fill) + body + std::string(n - n / 2, fill);
  if (align == '=' || (spec.zero && !spec.align)) {  // padding goes after the sign
    size_t sign_len = !body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ') ? 1 : 0;
    return body.substr(0, sign_len) + std::string(n, fill) + body.substr(sign_len);
  }
  return std::string(n, fill) + body;
}

// Formats one number with C's printf for conversion `type` (d x X o f F e E g G).
std::string format_number(const Value& v, const Spec& spec, char type) {
  std::string flags;
  if (spec.sign == '+' || spec.sign == ' ') flags.push_back(spec.sign);
  if (spec.alt) flags.push_back('#');
  std::string prec = spec.precision >= 0 ? fmt::format(".{}", spec.precision) : std::string();
  char buf[512];
  if (type == 'd' || type == 'x' || type == 'X' || type == 'o') {
    if (!v.is_number()) throw_runtime("%{} format: a real number is required, not {}", type, v.type_name());
    long long x = v.is_float() ? static_cast<long long>(std::trunc(v.as_double())) : static_cast<long long>(v.as_int());
    std::string f = fmt::format("%{}ll{}", flags, type);
    std::snprintf(buf, sizeof buf, f.c_str(), x);
    return buf;
  }
  if (!v.is_number()) throw_runtime("must be real number, not {}", v.type_name());
  std::string f = fmt::format("%{}{}{}", flags, prec.empty() ? ".6" : prec, type);
  std::snprintf(buf, sizeof buf, f.c_str(), v.as_double());
  return buf;
}

// The arguments of a % format, taken in order by conversions and `*`
// widths unless the format names mapping keys.
class PercentArgs {
 public:
  explicit PercentArgs(const Value& args)
      : positional_(args.is_tuple() ? args.list().items : std::vector<Value>{args}) {}
  const Value& take() {
    if (next_ >= positional_.size()) throw_runtime("not enough arguments for format string");
    return positional_[next_++];
  }
  bool all_taken() const { return next_ >= positional_.size(); }

 private:
  std::vector<Value> positional_;
  size_t next_ = 0;
};

// "%(key)..." at fmt_str[i] (just past the '%'): the mapping's value for
// key, with i moved past the ')'; null without a key.
const Value* read_mapping_key(std::string_view fmt_str, size_t& i, const Value& args) {
  if (fmt_str[i] != '(') return nullptr;
  size_t close = fmt_str.find(')', i);
  if (close == std::string_view::npos) throw_runtime("incomplete format key");
  if (!args.is_mapping()) throw_runtime("format requires a mapping");
  std::string key(fmt_str.substr(i + 1, close - i - 1));
  const Value* mapped = args.dict().find_str(key);
  if (mapped == nullptr) throw_runtime("KeyError: '{}'", key);
  i = close + 1;
  return mapped;
}

// A width or precision: digits, or '*' for the next argument.
int read_spec_number(std::string_view fmt_str, size_t& i, PercentArgs& args) {
  if (i < fmt_str.size() && fmt_str[i] == '*') {
    ++i;
    const Value& v = args.take();
    if (!v.is_int()) throw_runtime("* wants int");
    return static_cast<int>(v.as_int());
  }
  int n = 0;
  while (i < fmt_str.size() && fmt_str[i] >= '0' && fmt_str[i] <= '9') n = n * 10 + (fmt_str[i++] - '0');
  return n;
}

// Flags, width, precision and length modifiers, leaving i at the conversion.
Spec read_percent_spec(std::string_view fmt_str, size_t& i, PercentArgs& args) {
  Spec spec;
  for (; i < fmt_str.size(); ++i) {
    char c = fmt_str[i];
    if (c == '-') spec.align = '<';
    else if (c == '+' || c == ' ') spec.sign = (spec.sign == '+') ? '+' : c;
    else if (c == '#') spec.alt = true;
    else if (c == '0') spec.zero = true;
    else break;
  }
  if (spec.align == '<') spec.zero = false;
  if (i < fmt_str.size() && (fmt_str[i] == '*' || (fmt_str[i] >= '1' && fmt_str[i] <= '9')))
    spec.width = read_spec_number(fmt_str, i, args);
  if (i < fmt_str.size() && fmt_str[i] == '.') {
    ++i;
    spec.precision = read_spec_number(fmt_str, i, args);
  }
  while (i < fmt_str.size() && (fmt_str[i] == 'h' || fmt_str[i] == 'l' || fmt_str[i] == 'L')) ++i;
  if (i >= fmt_str.size()) throw_runtime("incomplete format");
  return spec;
}

// One conversion's text before padding; text conversions turn off zero padding.
std::string convert_percent(char conv, const Value& v, Spec& spec) {
  std::string body;
  switch (conv) {
    case 's':
    case 'r':
    case 'a': {
      body = conv == 's' ? to_str(v) : to_repr(v);
      if (spec.precision >= 0) {
        std::u32string chars = decode_utf8(body);
        if (chars.size() > static_cast<size_t>(spec.precision)) body = encode_utf8(chars.substr(0, static_cast<size_t>(spec.precision)));
      }
      spec.zero = false;
      break;
    }
    case 'c':
      if (v.is_string() && utf8_length(v.as_string()) == 1) body = v.as_string();
      else if (v.is_int()) append_utf8(body, static_cast<char32_t>(v.as_int()));
      else throw_runtime("%c requires int or char");
      spec.zero = false;
      break;
    case 'd': case 'i': case 'u': body = format_number(v, spec, 'd'); break;
    case 'x': case 'X': case 'o': case 'f': case 'F': case 'e': case 'E': case 'g': case 'G':
      body = format_number(v, spec, conv);
      break;
    default: throw_runtime("unsupported format character '{}'", conv);
  }
  return body;
}

}  // namespace

std::string percent_format(std::string_view fmt_str, const Value& args) {
  PercentArgs positional(args);
  bool used_mapping = false;
  std::string out;
  for (size_t i = 0; i < fmt_str.size(); ++i) {
    if (fmt_str[i] != '%') {
      out.push_back(fmt_str[i]);
      continue;
    }
    if (++i >= fmt_str.size()) throw_runtime("incomplete format");
    const Value* mapped = read_mapping_key(fmt_str, i, args);
    if (mapped) used_mapping = true;
    Spec spec = read_percent_spec(fmt_str, i, positional);
    char conv = fmt_str[i];
    if (conv == '%') {
      out.push_back('%');
      continue;
    }
    const Value& v = mapped ? *mapped : positional.take();
    std::string body = convert_percent(conv, v, spec);
    out += pad(std::move(body), spec, '>');
  }
  if (!used_mapping && !args.is_mapping() && !positional.all_taken()) {
    throw_runtime("not all arguments converted during string formatting");
  }
  return out;
}

namespace {

Spec parse_spec(std::string_view s) {
  Spec spec;
  size_t i = 0;
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (s.size() >= 2 && is_align(s[1])) {
    spec.fill = s[0];
    spec.align = s[1];
    i = 2;
  } else if (!s.empty() && is_align(s[0])) {
    spec.align = s[0];
    i = 1;
  }
  if (i < s.size() && (s[i] == '+' || s[i] == '-' || s[i] == ' ')) spec.sign = s[i++];
  if (i < s.size() && s[i] == '#') spec.alt = (++i, true);
  if (i < s.size() && s[i] == '0') spec.zero = (++i, true);
  int w = -1;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') w = (w < 0 ? 0 : w * 10) + (s[i++] - '0');
  spec.width = w;
  if (i < s.size() && s[i] == '.') {
    ++i;
    spec.precision = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') spec.precision = spec.precision * 10 + (s[i++] - '0');
  }
  if (i < s.size()) spec.type = s[i++];
  if (i != s.size()) throw_runtime("invalid format specifier '{}'", s);
  return spec;
}

std::string apply_spec(const Value& v, const Spec& spec) {
  char type = spec.type;
  if (v.is_string() || (!v.is_number() && type == 0)) {
    if (type != 0 && type != 's') throw_runtime("unknown format code '{}' for object of type '{}'", type, v.type_name());
    std::string body = to_str(v);
    if (spec.precision >= 0) {
      std::u32string chars = decode_utf8(body);
      if (chars.size() > static_cast<size_t>(spec.precision)) body = encode_utf8(chars.substr(0, static_cast<size_t>(spec.precision)));
    }
    return pad(std::move(body), spec, '<');
  }
  if (!v.is_number()) throw_runtime("unsupported format string passed to {}.__format__", v.type_name());
  std::string body;
  if (type == 0 && spec.precision < 0) {
    body = to_str(v.is_bool() ? Value(v.as_int()) : v);
    if (spec.sign != '-' && body[0] != '-') body.insert(body.begin(), spec.sign);
  } else if (type == '%') {
    Spec s = spec;
    s.precision = spec.precision < 0 ? 6 : spec.precision;
    body = format_number(Value(v.as_double() * 100.0), s, 'f') + "%";
  } else if (type == 'b') {
    uint64_t x = static_cast<uint64_t>(std::llabs(v.as_int()));
    do body.insert(body.begin(), static_cast<char>('0' + (x & 1))); while (x >>= 1);
    if (v.as_int() < 0) body.insert(body.begin(), '-');
  } else {
    char t = type == 0 ? 'g' : (type == 'n' ? 'g' : type);
    if ((t == 'd' || t == 'x' || t == 'X' || t == 'o') && v.is_float()) {
      throw_runtime("unknown format code '{}' for object of type 'float'", t);
    }
    body = format_number(v, spec, t);
  }
  return pad(std::move(body), spec, '>');
}

}  // namespace

std::string str_format(std::string_view f, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    char c = f[i];
    if (c == '}') {
      if (i + 1 < f.size() && f[i + 1] == '}') ++i;
      else throw_runtime("single '}}' encountered in format string");
      out.push_back('}');
      continue;
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < f.size() && f[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    size_t close = f.find('}', i);
    if (close == std::string_view::npos) throw_runtime("single '{{' encountered in format string");
    std::string_view field = f.substr(i + 1, close - i - 1);
    i = close;
    std::string_view spec_text, conv;
    if (size_t colon = field.find(':'); colon != std::string_view::npos) {
      spec_text = field.substr(colon + 1);
      field = field.substr(0, colon);
    }
    if (size_t bang = field.find('!'); bang != std::string_view::npos) {
      conv = field.substr(bang + 1);
      field = field.substr(0, bang);
    }
    size_t name_end = std::min(field.find('.'), field.find('['));
    std::string_view head = field.substr(0, name_end);
    Value v;
    if (head.empty() || head.find_first_not_of("0123456789") == std::string_view::npos) {
      size_t index = head.empty() ? auto_index++ : static_cast<size_t>(std::stoul(std::string(head)));
      if (index >= args.args.size()) throw_runtime("Replacement index {} out of range for positional args tuple", index);
      v = args.args[index];
    } else {
      bool found = false;
      for (const auto& [name, value] : args.kwargs) {
        if (name == head) {
          v = value;
          found = true;
        }
      }
      if (!found) throw_runtime("KeyError: '{}'", head);
    }
    for (size_t p = name_end; p < field.size();) {  // .attr and [key] accessors
      if (field[p] == '.') {
        size_t e = std::min(field.find('.', p + 1), field.find('[', p + 1));
        v = get_attr(v, field.substr(p + 1, e - p - 1));
        p = e;
      } else {
        size_t e = field.find(']', p);
        if (e == std::string_view::npos) throw_runtime("Missing ']' in format string");
        std::string key(field.substr(p + 1, e - p - 1));
        bool digits = !key.empty() && key.find_first_not_of("0123456789") == std::string::npos;
        v = get_item(v, digits ? Value(static_cast<int64_t>(std::stoll(key))) : Value(key));
        p = e + 1;
      }
    }
    if (conv == "r" || conv == "a") v = Value(to_repr(v));
    else if (conv == "s") v = Value(to_str(v));
    else if (!conv.empty()) throw_runtime("Unknown conversion specifier {}", conv);
    out += apply_spec(v, parse_spec(spec_text));
  }
  return out;
}

}  // namespace kvlm::jinja
