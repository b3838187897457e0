#include "chat/jinja/json.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "chat/jinja/error.h"
#include "chat/jinja/utf8.h"

namespace kvlm::jinja {

namespace {

// Deeper JSON is refused rather than walked: each level is a few stack frames,
// and a few thousand levels from a client would overflow a handler thread's stack.
constexpr int kMaxFromJsonDepth = 128;

Value from_json_at(const nlohmann::ordered_json& j, int depth) {
  if (depth > kMaxFromJsonDepth) throw_runtime("JSON value nested deeper than {} levels", kMaxFromJsonDepth);
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(j.get_ref<const std::string&>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& item : j) items.push_back(from_json_at(item, depth + 1));
      return Value::make_list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Value d = Value::make_dict();
      for (const auto& [key, value] : j.items()) d.dict().set(key, from_json_at(value, depth + 1));
      return d;
    }
    default: return Value::none();  // binary and discarded values do not come from parsed JSON text
  }
}

}  // namespace

Value from_json(const nlohmann::ordered_json& j) { return from_json_at(j, 0); }

namespace {

void append_json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out.push_back('"');
  for (char32_t c : decode_utf8(s)) {
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (c < 0x20 || (ensure_ascii && c >= 0x7F)) {
      if (c >= 0x10000) {
        char32_t v = c - 0x10000;
        out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
      }
    } else {
      append_utf8(out, c);
    }
  }
  out.push_back('"');
}

std::string float_json(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return float_repr(d);
}

class Dumper {
 public:
  explicit Dumper(const JsonDumpOptions& o)
      : opt_(o),
        item_sep_(o.item_separator.value_or(o.indent ? "," : ", ")),
        key_sep_(o.key_separator.value_or(": ")) {}

  void dump(const Value& v, int level) {
    if (++depth_ > 512) throw_runtime("tojson: value nested too deeply (or a container contains itself)");
    switch (v.kind()) {
      case Value::Kind::kNone: out_ += "null"; break;
      case Value::Kind::kBool: out_ += v.as_bool() ? "true" : "false"; break;
      case Value::Kind::kInt: out_ += std::to_string(v.as_int()); break;
      case Value::Kind::kFloat: out_ += float_json(v.as_double()); break;
      case Value::Kind::kString: append_json_string(out_, v.as_string(), opt_.ensure_ascii); break;
      case Value::Kind::kList: dump_list(v.list().items, level); break;
      case Value::Kind::kDict:
        if (v.is_mapping()) {
          dump_dict(v.dict(), level);
          break;
        }
        [[fallthrough]];
      default: throw_runtime("Object of type {} is not JSON serializable", v.type_name());
    }
    --depth_;
  }

  std::string take() { return std::move(out_); }

 private:
  void newline(int level) {
    if (!opt_.indent) return;
    out_.push_back('\n');
    for (int i = 0; i < level; ++i) out_ += *opt_.indent;
  }

  void dump_list(const std::vector<Value>& items, int level) {
    if (items.empty()) {
      out_ += "[]";
      return;
    }
    out_.push_back('[');
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out_ += item_sep_;
      newline(level + 1);
      dump(items[i], level + 1);
    }
    newline(level);
    out_.push_back(']');
  }

  void dump_dict(const DictObj& d, int level) {
    if (d.size() == 0) {
      out_ += "{}";
      return;
    }
    std::vector<const std::pair<Value, Value>*> items;
    for (const auto& item : d.items()) items.push_back(&item);
    if (opt_.sort_keys) {
      std::stable_sort(items.begin(), items.end(), [](const auto* a, const auto* b) {
        return compare_values(a->first, b->first, "<") < 0;
      });
    }
    out_.push_back('{');
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out_ += item_sep_;
      newline(level + 1);
      append_json_string(out_, key_text(items[i]->first), opt_.ensure_ascii);
      out_ += key_sep_;
      dump(items[i]->second, level + 1);
    }
    newline(level);
    out_.push_back('}');
  }

  static std::string key_text(const Value& key) {
    switch (key.kind()) {
      case Value::Kind::kString: return key.as_string();
      case Value::Kind::kBool: return key.as_bool() ? "true" : "false";
      case Value::Kind::kInt: return std::to_string(key.as_int());
      case Value::Kind::kFloat: return float_json(key.as_double());
      case Value::Kind::kNone: return "null";
      default: throw_runtime("keys must be str, int, float, bool or None, not {}", key.type_name());
    }
  }

  const JsonDumpOptions& opt_;
  std::string item_sep_, key_sep_;
  std::string out_;
  int depth_ = 0;
};

}  // namespace

std::string json_dumps(const Value& v, const JsonDumpOptions& options) {
  Dumper d(options);
  d.dump(v, 0);
  return d.take();
}

}  // namespace kvlm::jinja
