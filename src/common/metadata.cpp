#include "common/metadata.h"

#include "common/error.h"

namespace kvlm {

std::string_view meta_type_name(MetaType t) {
  switch (t) {
    case MetaType::kU8: return "u8";
    case MetaType::kI8: return "i8";
    case MetaType::kU16: return "u16";
    case MetaType::kI16: return "i16";
    case MetaType::kU32: return "u32";
    case MetaType::kI32: return "i32";
    case MetaType::kF32: return "f32";
    case MetaType::kBool: return "bool";
    case MetaType::kString: return "string";
    case MetaType::kArray: return "array";
    case MetaType::kU64: return "u64";
    case MetaType::kI64: return "i64";
    case MetaType::kF64: return "f64";
  }
  return "?";
}

bool MetaValue::is_integer() const {
  switch (type) {
    case MetaType::kU8: case MetaType::kI8: case MetaType::kU16: case MetaType::kI16:
    case MetaType::kU32: case MetaType::kI32: case MetaType::kU64: case MetaType::kI64:
      return true;
    default:
      return false;
  }
}

int64_t MetaValue::as_int(std::string_view what) const {
  if (!is_integer() && type != MetaType::kBool)
    throw_error(ErrorCode::kCorrupt, "metadata '{}' is {}, expected an integer", what, meta_type_name(type));
  if (const auto* u = std::get_if<uint64_t>(&value)) {
    if (*u > static_cast<uint64_t>(INT64_MAX))
      throw_error(ErrorCode::kCorrupt, "metadata '{}' value {} is too large", what, *u);
    return static_cast<int64_t>(*u);
  }
  return std::get<int64_t>(value);
}

double MetaValue::as_float(std::string_view what) const {
  if (is_float()) return std::get<double>(value);
  if (is_integer()) return static_cast<double>(as_int(what));
  throw_error(ErrorCode::kCorrupt, "metadata '{}' is {}, expected a number", what, meta_type_name(type));
}

bool MetaValue::as_bool(std::string_view what) const {
  if (type == MetaType::kBool) return std::get<int64_t>(value) != 0;
  if (is_integer()) return as_int(what) != 0;
  throw_error(ErrorCode::kCorrupt, "metadata '{}' is {}, expected a bool", what, meta_type_name(type));
}

const std::string& MetaValue::as_string(std::string_view what) const {
  if (type != MetaType::kString)
    throw_error(ErrorCode::kCorrupt, "metadata '{}' is {}, expected a string", what, meta_type_name(type));
  return std::get<std::string>(value);
}

const std::vector<MetaValue>& MetaValue::as_array(std::string_view what) const {
  if (type != MetaType::kArray)
    throw_error(ErrorCode::kCorrupt, "metadata '{}' is {}, expected an array", what, meta_type_name(type));
  return std::get<std::vector<MetaValue>>(value);
}

std::string MetaValue::to_string(size_t max_items) const {
  switch (type) {
    case MetaType::kString: {
      const auto& s = std::get<std::string>(value);
      if (s.size() > 200) return fmt::format("\"{}...\" ({} bytes)", s.substr(0, 200), s.size());
      return fmt::format("\"{}\"", s);
    }
    case MetaType::kBool: return std::get<int64_t>(value) ? "true" : "false";
    case MetaType::kF32: case MetaType::kF64: return fmt::format("{}", std::get<double>(value));
    case MetaType::kArray: {
      const auto& items = std::get<std::vector<MetaValue>>(value);
      std::string out = fmt::format("[{} x {}] [", items.size(), meta_type_name(elem_type));
      for (size_t i = 0; i < items.size() && i < max_items; ++i) {
        if (i) out += ", ";
        out += items[i].to_string(max_items);
      }
      if (items.size() > max_items) out += ", ...";
      return out + "]";
    }
    default:
      if (const auto* u = std::get_if<uint64_t>(&value)) return fmt::format("{}", *u);
      return fmt::format("{}", std::get<int64_t>(value));
  }
}

void Metadata::set(std::string key, MetaValue value) {
  auto it = index_.find(key);
  if (it != index_.end()) {
    entries_[it->second].second = std::move(value);
    return;
  }
  index_.emplace(key, entries_.size());
  entries_.emplace_back(std::move(key), std::move(value));
}

const MetaValue* Metadata::find(std::string_view key) const {
  auto it = index_.find(std::string(key));
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

namespace {
const MetaValue& require(const Metadata& m, std::string_view key) {
  const MetaValue* v = m.find(key);
  if (v == nullptr) throw_error(ErrorCode::kCorrupt, "missing metadata key '{}'", key);
  return *v;
}
}  // namespace

int64_t Metadata::require_int(std::string_view key) const { return require(*this, key).as_int(key); }
double Metadata::require_float(std::string_view key) const { return require(*this, key).as_float(key); }
const std::string& Metadata::require_string(std::string_view key) const {
  return require(*this, key).as_string(key);
}
std::vector<std::string> Metadata::require_string_array(std::string_view key) const {
  auto v = get_string_array(key);
  if (!v) throw_error(ErrorCode::kCorrupt, "missing metadata key '{}'", key);
  return std::move(*v);
}

std::optional<int64_t> Metadata::get_int(std::string_view key) const {
  const MetaValue* v = find(key);
  return v ? std::optional<int64_t>(v->as_int(key)) : std::nullopt;
}
std::optional<double> Metadata::get_float(std::string_view key) const {
  const MetaValue* v = find(key);
  return v ? std::optional<double>(v->as_float(key)) : std::nullopt;
}
std::optional<bool> Metadata::get_bool(std::string_view key) const {
  const MetaValue* v = find(key);
  return v ? std::optional<bool>(v->as_bool(key)) : std::nullopt;
}
std::optional<std::string> Metadata::get_string(std::string_view key) const {
  const MetaValue* v = find(key);
  return v ? std::optional<std::string>(v->as_string(key)) : std::nullopt;
}
std::optional<std::vector<std::string>> Metadata::get_string_array(std::string_view key) const {
  const MetaValue* v = find(key);
  if (!v) return std::nullopt;
  std::vector<std::string> out;
  for (const auto& item : v->as_array(key)) out.push_back(item.as_string(key));
  return out;
}
std::optional<std::vector<float>> Metadata::get_float_array(std::string_view key) const {
  const MetaValue* v = find(key);
  if (!v) return std::nullopt;
  std::vector<float> out;
  for (const auto& item : v->as_array(key)) out.push_back(static_cast<float>(item.as_float(key)));
  return out;
}
std::optional<std::vector<int64_t>> Metadata::get_int_array(std::string_view key) const {
  const MetaValue* v = find(key);
  if (!v) return std::nullopt;
  std::vector<int64_t> out;
  for (const auto& item : v->as_array(key)) out.push_back(item.as_int(key));
  return out;
}

MetaValue meta_u32(uint32_t v) { return MetaValue{MetaType::kU32, MetaType::kU8, uint64_t{v}}; }
MetaValue meta_i32(int32_t v) { return MetaValue{MetaType::kI32, MetaType::kU8, int64_t{v}}; }
MetaValue meta_f32(float v) { return MetaValue{MetaType::kF32, MetaType::kU8, double{v}}; }
MetaValue meta_bool(bool v) { return MetaValue{MetaType::kBool, MetaType::kU8, int64_t{v ? 1 : 0}}; }
MetaValue meta_string(std::string v) { return MetaValue{MetaType::kString, MetaType::kU8, std::move(v)}; }

namespace {

template <typename T, typename Make>
MetaValue array_of(MetaType elem, const std::vector<T>& values, Make make) {
  std::vector<MetaValue> items;
  items.reserve(values.size());
  for (const T& v : values) items.push_back(make(v));
  return MetaValue{MetaType::kArray, elem, std::move(items)};
}

}  // namespace

MetaValue meta_string_array(const std::vector<std::string>& v) { return array_of(MetaType::kString, v, meta_string); }
MetaValue meta_f32_array(const std::vector<float>& v) { return array_of(MetaType::kF32, v, meta_f32); }
MetaValue meta_i32_array(const std::vector<int32_t>& v) { return array_of(MetaType::kI32, v, meta_i32); }

}  // namespace kvlm
