#include "chat/jinja/operators.h"

#include <cmath>
#include <limits>
#include <string>

#include "chat/jinja/builtins.h"
#include "chat/jinja/error.h"
#include "chat/jinja/format.h"
#include "chat/jinja/utf8.h"

namespace kvlm::jinja {

namespace {

constexpr size_t kMaxRepeatBytes = size_t{64} << 20;  // 'x' * n beyond this is a runaway template

const char* op_symbol(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd: return "+";
    case BinaryOp::kSub: return "-";
    case BinaryOp::kMul: return "*";
    case BinaryOp::kDiv: return "/";
    case BinaryOp::kFloorDiv: return "//";
    case BinaryOp::kMod: return "%";
    case BinaryOp::kPow: return "**";
    case BinaryOp::kConcat: return "~";
  }
  return "?";
}

[[noreturn]] void unsupported(BinaryOp op, const Value& a, const Value& b) {
  throw_runtime("unsupported operand type(s) for {}: '{}' and '{}'", op_symbol(op), a.type_name(), b.type_name());
}

// `op` computes a op b into *r and returns true on overflow (the __builtin_*_overflow contract).
template <typename Op>
int64_t checked(Op op, int64_t a, int64_t b) {
  int64_t r = 0;
  if (op(a, b, &r)) throw_runtime("integer overflow");
  return r;
}

bool add_overflow(int64_t a, int64_t b, int64_t* r) { return __builtin_add_overflow(a, b, r); }
bool sub_overflow(int64_t a, int64_t b, int64_t* r) { return __builtin_sub_overflow(a, b, r); }
bool mul_overflow(int64_t a, int64_t b, int64_t* r) { return __builtin_mul_overflow(a, b, r); }

Value int_pow(int64_t base, int64_t exp) {
  if (exp < 0) return Value(std::pow(static_cast<double>(base), static_cast<double>(exp)));
  int64_t result = 1;
  while (exp > 0) {
    if (exp & 1) result = checked(mul_overflow, result, base);
    exp >>= 1;
    if (exp > 0) base = checked(mul_overflow, base, base);
  }
  return Value(result);
}

Value numeric(BinaryOp op, const Value& a, const Value& b) {
  if (!a.is_float() && !b.is_float()) {
    int64_t x = a.as_int(), y = b.as_int();
    switch (op) {
      case BinaryOp::kAdd: return Value(checked(add_overflow, x, y));
      case BinaryOp::kSub: return Value(checked(sub_overflow, x, y));
      case BinaryOp::kMul: return Value(checked(mul_overflow, x, y));
      case BinaryOp::kDiv:
        if (y == 0) throw_runtime("division by zero");
        return Value(static_cast<double>(x) / static_cast<double>(y));
      case BinaryOp::kFloorDiv:
      case BinaryOp::kMod: {
        if (y == 0) throw_runtime("integer division or modulo by zero");
        if (x == std::numeric_limits<int64_t>::min() && y == -1) throw_runtime("integer overflow");
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {  // Python floors toward -inf
          --q;
          m += y;
        }
        return Value(op == BinaryOp::kFloorDiv ? q : m);
      }
      case BinaryOp::kPow: return int_pow(x, y);
      default: break;
    }
  }
  double x = a.as_double(), y = b.as_double();
  switch (op) {
    case BinaryOp::kAdd: return Value(x + y);
    case BinaryOp::kSub: return Value(x - y);
    case BinaryOp::kMul: return Value(x * y);
    case BinaryOp::kDiv:
      if (y == 0) throw_runtime("float division by zero");
      return Value(x / y);
    case BinaryOp::kFloorDiv:
    case BinaryOp::kMod: {
      if (y == 0) throw_runtime("float modulo");
      double m = std::fmod(x, y);
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      if (op == BinaryOp::kMod) return Value(m);
      return Value(std::round((x - m) / y));  // (x - m) / y is integral up to rounding
    }
    case BinaryOp::kPow: return Value(std::pow(x, y));
    default: break;
  }
  unsupported(op, a, b);
}

Value repeat(const Value& seq, int64_t n) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    if (!s.empty() && static_cast<size_t>(n) > kMaxRepeatBytes / s.size()) throw_runtime("string repetition too large");
    std::string out;
    out.reserve(s.size() * static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out += s;
    return Value(std::move(out));
  }
  const auto& items = seq.list().items;
  if (!items.empty() && static_cast<size_t>(n) > kMaxRepeatBytes / items.size()) throw_runtime("list repetition too large");
  std::vector<Value> out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), items.begin(), items.end());
  return seq.is_tuple() ? Value::make_tuple(std::move(out)) : Value::make_list(std::move(out));
}

std::string object_desc(const Value& obj) {
  return obj.is_none() ? std::string("None") : obj.type_name() + " object";
}

Value missing_attr(const Value& obj, std::string_view name) {
  return Value::undefined(fmt::format("'{}' has no attribute '{}'", object_desc(obj), name));
}

// Resolves a Python index against a sequence of `size`; nullopt when out of range.
std::optional<size_t> resolve_index(int64_t index, size_t size) {
  if (index < 0) index += static_cast<int64_t>(size);
  if (index < 0 || index >= static_cast<int64_t>(size)) return std::nullopt;
  return static_cast<size_t>(index);
}

}  // namespace

Value binary_op(BinaryOp op, const Value& a, const Value& b) {
  if (op == BinaryOp::kConcat) return Value(to_str(a) + to_str(b));
  if (a.is_undefined()) a.fail_undefined();
  if (b.is_undefined()) b.fail_undefined();
  if (a.is_number() && b.is_number()) return numeric(op, a, b);
  switch (op) {
    case BinaryOp::kAdd:
      if (a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
      if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
        std::vector<Value> out = a.list().items;
        out.insert(out.end(), b.list().items.begin(), b.list().items.end());
        return a.is_tuple() ? Value::make_tuple(std::move(out)) : Value::make_list(std::move(out));
      }
      if (a.is_string() || a.is_list()) {
        throw_runtime("can only concatenate {} (not \"{}\") to {}", a.type_name(), b.type_name(), a.type_name());
      }
      break;
    case BinaryOp::kMul:
      if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) return repeat(a, b.as_int());
      if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) return repeat(b, a.as_int());
      break;
    case BinaryOp::kMod:
      if (a.is_string()) return Value(percent_format(a.as_string(), b));
      break;
    default: break;
  }
  unsupported(op, a, b);
}

Value unary_op(UnaryOp op, const Value& v) {
  if (op == UnaryOp::kNot) return Value(!v.truthy());
  if (v.is_undefined()) v.fail_undefined();
  if (v.is_float()) return Value(op == UnaryOp::kNeg ? -v.as_double() : v.as_double());
  if (v.is_int() || v.is_bool()) {
    int64_t x = v.as_int();
    if (op == UnaryOp::kPos) return Value(x);
    if (x == std::numeric_limits<int64_t>::min()) throw_runtime("integer overflow");
    return Value(-x);
  }
  throw_runtime("bad operand type for unary {}: '{}'", op == UnaryOp::kNeg ? "-" : "+", v.type_name());
}

Value get_attr(const Value& obj, std::string_view name) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined: obj.fail_undefined();
    case Value::Kind::kDict:
      if (obj.is_mapping()) {
        // Python's getattr sees dict methods before keys: `d.items` is the method.
        if (auto method = find_method(obj, name)) return *method;
        if (auto refusal = unsafe_method(obj, name)) return Value::undefined(*refusal);
      }
      if (const Value* v = obj.dict().find_str(name)) return *v;
      return missing_attr(obj, name);
    case Value::Kind::kString:
    case Value::Kind::kList:
      if (auto method = find_method(obj, name)) return *method;
      if (auto refusal = unsafe_method(obj, name)) return Value::undefined(*refusal);
      return missing_attr(obj, name);
    default: return missing_attr(obj, name);
  }
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) obj.fail_undefined();
  bool int_key = key.is_int() || key.is_bool();
  if (obj.is_list() && int_key) {
    const auto& items = obj.list().items;
    if (auto i = resolve_index(key.as_int(), items.size())) return items[*i];
    return Value::undefined(fmt::format("'{}' has no element {}", object_desc(obj), key.as_int()));
  }
  if (obj.is_string() && int_key) {
    const std::string& s = obj.as_string();
    std::u32string chars = decode_utf8(s);
    if (auto i = resolve_index(key.as_int(), chars.size())) return Value(encode_utf8(std::u32string_view(chars).substr(*i, 1)));
    return Value::undefined(fmt::format("'{}' has no element {}", object_desc(obj), key.as_int()));
  }
  if (obj.is_mapping() && (key.is_string() || key.is_number() || key.is_none() || key.is_tuple())) {
    if (const Value* v = obj.dict().find(key)) return *v;
  }
  if (key.is_string()) return get_attr(obj, key.as_string());
  return Value::undefined(fmt::format("'{}' has no element {}", object_desc(obj), to_repr(key)));
}

Value get_slice(const Value& obj, std::optional<int64_t> start, std::optional<int64_t> stop,
                std::optional<int64_t> step) {
  if (obj.is_undefined()) obj.fail_undefined();
  if (!obj.is_string() && !obj.is_list()) return Value::undefined(fmt::format("'{}' is not sliceable", object_desc(obj)));
  int64_t st = step.value_or(1);
  if (st == 0) throw_runtime("slice step cannot be zero");
  std::u32string chars;
  int64_t len = 0;
  if (obj.is_string()) {
    chars = decode_utf8(obj.as_string());
    len = static_cast<int64_t>(chars.size());
  } else {
    len = static_cast<int64_t>(obj.list().items.size());
  }
  auto clamp = [&](std::optional<int64_t> v, int64_t fallback) {
    if (!v) return fallback;
    int64_t i = *v;
    if (i < 0) {
      i += len;
      if (i < 0) i = st < 0 ? -1 : 0;
    } else if (i >= len) {
      i = st < 0 ? len - 1 : len;
    }
    return i;
  };
  int64_t lo = clamp(start, st < 0 ? len - 1 : 0);
  int64_t hi = clamp(stop, st < 0 ? -1 : len);
  std::vector<int64_t> picks;
  for (int64_t i = lo; st > 0 ? i < hi : i > hi;) {
    picks.push_back(i);
    if (__builtin_add_overflow(i, st, &i)) break;
  }
  if (obj.is_string()) {
    std::u32string out;
    for (int64_t i : picks) out.push_back(chars[static_cast<size_t>(i)]);
    return Value(encode_utf8(out));
  }
  std::vector<Value> out;
  for (int64_t i : picks) out.push_back(obj.list().items[static_cast<size_t>(i)]);
  return obj.is_tuple() ? Value::make_tuple(std::move(out)) : Value::make_list(std::move(out));
}

Value get_attr_path(const Value& obj, std::string_view path) {
  Value cur = obj;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string_view part = path.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    bool digits = !part.empty() && part.find_first_not_of("0123456789") == std::string_view::npos;
    cur = digits ? get_item(cur, Value(static_cast<int64_t>(std::stoll(std::string(part))))) : get_item(cur, Value(part));
    if (dot == std::string_view::npos) return cur;
    start = dot + 1;
  }
}

}  // namespace kvlm::jinja
