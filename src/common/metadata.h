// Model metadata as plain data: the key/value pairs of a GGUF header. The
// GGUF reader (model/) produces it; the tokenizer, model config and `kvlm
// inspect` read it. Living in common/ lets the tokenizer read vocabularies
// without depending on the model layer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

namespace kvlm {

// Value types in GGUF's numbering (gguf_type), so a reader can cast.
enum class MetaType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};
std::string_view meta_type_name(MetaType t);

struct MetaValue {
  MetaType type = MetaType::kU8;
  MetaType elem_type = MetaType::kU8;  // element type when type == kArray
  // Signed integers and bool are held as int64_t, unsigned as uint64_t,
  // floats as double.
  std::variant<int64_t, uint64_t, double, std::string, std::vector<MetaValue>> value;

  bool is_integer() const;
  bool is_float() const { return type == MetaType::kF32 || type == MetaType::kF64; }
  bool is_string() const { return type == MetaType::kString; }
  bool is_array() const { return type == MetaType::kArray; }
  // Throw Error(kCorrupt) naming `what` if the value has another type.
  int64_t as_int(std::string_view what) const;
  double as_float(std::string_view what) const;  // integers convert
  bool as_bool(std::string_view what) const;
  const std::string& as_string(std::string_view what) const;
  const std::vector<MetaValue>& as_array(std::string_view what) const;
  // A short human-readable rendering (arrays abbreviated after `max_items`).
  std::string to_string(size_t max_items = 8) const;
};

// Ordered key/value map (file order kept for display).
class Metadata {
 public:
  void set(std::string key, MetaValue value);
  const MetaValue* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }
  const std::vector<std::pair<std::string, MetaValue>>& entries() const { return entries_; }

  // require_*: Error(kCorrupt) "missing metadata key 'k'" when absent or of the wrong type.
  int64_t require_int(std::string_view key) const;
  double require_float(std::string_view key) const;
  const std::string& require_string(std::string_view key) const;
  std::vector<std::string> require_string_array(std::string_view key) const;
  // get_*: nullopt when absent; Error(kCorrupt) when present with the wrong type.
  std::optional<int64_t> get_int(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::string> get_string(std::string_view key) const;
  std::optional<std::vector<std::string>> get_string_array(std::string_view key) const;
  std::optional<std::vector<float>> get_float_array(std::string_view key) const;
  std::optional<std::vector<int64_t>> get_int_array(std::string_view key) const;

 private:
  std::vector<std::pair<std::string, MetaValue>> entries_;
  std::unordered_map<std::string, size_t> index_;
};

// MetaValues from plain values (GgufWriter::set, metadata built in memory).
MetaValue meta_u32(uint32_t v);
MetaValue meta_i32(int32_t v);
MetaValue meta_f32(float v);
MetaValue meta_bool(bool v);
MetaValue meta_string(std::string v);
MetaValue meta_string_array(const std::vector<std::string>& v);
MetaValue meta_f32_array(const std::vector<float>& v);
MetaValue meta_i32_array(const std::vector<int32_t>& v);

}  // namespace kvlm
