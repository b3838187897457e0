#include "model/gguf_writer.h"

#include <cstring>
#include <fstream>

#include "common/error.h"

namespace kvlm {
namespace {

class ByteSink {
 public:
  template <typename T>
  void put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    bytes_.insert(bytes_.end(), p, p + sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    bytes_.insert(bytes_.end(), s.begin(), s.end());
  }
  void pad_to(uint64_t alignment) {
    while (bytes_.size() % alignment != 0) bytes_.push_back(0);
  }
  void append(const std::vector<uint8_t>& b) { bytes_.insert(bytes_.end(), b.begin(), b.end()); }
  std::vector<uint8_t>& bytes() { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

void put_value(ByteSink& out, const MetaValue& v) {
  auto as_u = [&]() -> uint64_t {
    if (const auto* u = std::get_if<uint64_t>(&v.value)) return *u;
    return static_cast<uint64_t>(std::get<int64_t>(v.value));
  };
  switch (v.type) {
    case MetaType::kU8: case MetaType::kI8: case MetaType::kBool: out.put<uint8_t>(static_cast<uint8_t>(as_u())); break;
    case MetaType::kU16: case MetaType::kI16: out.put<uint16_t>(static_cast<uint16_t>(as_u())); break;
    case MetaType::kU32: case MetaType::kI32: out.put<uint32_t>(static_cast<uint32_t>(as_u())); break;
    case MetaType::kU64: case MetaType::kI64: out.put<uint64_t>(as_u()); break;
    case MetaType::kF32: out.put<float>(static_cast<float>(std::get<double>(v.value))); break;
    case MetaType::kF64: out.put<double>(std::get<double>(v.value)); break;
    case MetaType::kString: out.put_string(std::get<std::string>(v.value)); break;
    case MetaType::kArray: {
      const auto& items = std::get<std::vector<MetaValue>>(v.value);
      out.put<uint32_t>(static_cast<uint32_t>(v.elem_type));
      out.put<uint64_t>(items.size());
      for (const auto& item : items) put_value(out, item);
      break;
    }
  }
}

MetaValue array_of(MetaType elem, std::vector<MetaValue> items) {
  MetaValue v;
  v.type = MetaType::kArray;
  v.elem_type = elem;
  v.value = std::move(items);
  return v;
}

}  // namespace

MetaValue meta_u32(uint32_t v) { return MetaValue{MetaType::kU32, MetaType::kU8, uint64_t{v}}; }
MetaValue meta_i32(int32_t v) { return MetaValue{MetaType::kI32, MetaType::kU8, int64_t{v}}; }
MetaValue meta_f32(float v) { return MetaValue{MetaType::kF32, MetaType::kU8, double{v}}; }
MetaValue meta_bool(bool v) { return MetaValue{MetaType::kBool, MetaType::kU8, int64_t{v ? 1 : 0}}; }
MetaValue meta_string(std::string v) { return MetaValue{MetaType::kString, MetaType::kU8, std::move(v)}; }

void GgufWriter::set_string(const std::string& key, std::string v) { set(key, meta_string(std::move(v))); }
void GgufWriter::set_u32(const std::string& key, uint32_t v) { set(key, meta_u32(v)); }
void GgufWriter::set_f32(const std::string& key, float v) { set(key, meta_f32(v)); }
void GgufWriter::set_bool(const std::string& key, bool v) { set(key, meta_bool(v)); }

void GgufWriter::set_string_array(const std::string& key, const std::vector<std::string>& v) {
  std::vector<MetaValue> items;
  for (const auto& s : v) items.push_back(meta_string(s));
  set(key, array_of(MetaType::kString, std::move(items)));
}
void GgufWriter::set_f32_array(const std::string& key, const std::vector<float>& v) {
  std::vector<MetaValue> items;
  for (float f : v) items.push_back(meta_f32(f));
  set(key, array_of(MetaType::kF32, std::move(items)));
}
void GgufWriter::set_i32_array(const std::string& key, const std::vector<int32_t>& v) {
  std::vector<MetaValue> items;
  for (int32_t i : v) items.push_back(meta_i32(i));
  set(key, array_of(MetaType::kI32, std::move(items)));
}

void GgufWriter::add_tensor(const std::string& name, std::vector<int64_t> dims, DType dtype,
                            std::vector<uint8_t> data) {
  tensors_.push_back({name, std::move(dims), dtype, std::move(data)});
}

std::vector<uint8_t> GgufWriter::serialize() const {
  ByteSink out;
  out.put<uint32_t>(0x46554747);  // "GGUF" little-endian
  out.put<uint32_t>(3);
  out.put<uint64_t>(tensors_.size());
  out.put<uint64_t>(metadata_.entries().size());
  for (const auto& [key, value] : metadata_.entries()) {
    out.put_string(key);
    out.put<uint32_t>(static_cast<uint32_t>(value.type));
    put_value(out, value);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    out.put_string(t.name);
    out.put<uint32_t>(static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) out.put<uint64_t>(static_cast<uint64_t>(d));
    out.put<uint32_t>(dtype_info(t.dtype).ggml_type);
    out.put<uint64_t>(offset);
    offset += (t.data.size() + alignment_ - 1) / alignment_ * alignment_;
  }
  out.pad_to(alignment_);
  for (const auto& t : tensors_) {
    out.append(t.data);
    out.pad_to(alignment_);
  }
  return std::move(out.bytes());
}

void GgufWriter::write(const std::string& path) const {
  std::vector<uint8_t> bytes = serialize();
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw_error(ErrorCode::kInvalidArgument, "cannot write '{}'", path);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw_error(ErrorCode::kInvalidArgument, "failed writing '{}'", path);
}

}  // namespace kvlm
