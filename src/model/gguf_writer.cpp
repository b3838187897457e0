#include "model/gguf_writer.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>

#include "common/assert.h"
#include "common/error.h"

namespace kvlm {
namespace {

class ByteSink {
 public:
  // Reserving also quiets GCC 12's false -Wstringop-overflow on inserts into an empty vector.
  ByteSink() { bytes_.reserve(4096); }
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

}  // namespace

void GgufWriter::set_string(const std::string& key, std::string v) { set(key, meta_string(std::move(v))); }
void GgufWriter::set_u32(const std::string& key, uint32_t v) { set(key, meta_u32(v)); }
void GgufWriter::set_f32(const std::string& key, float v) { set(key, meta_f32(v)); }
void GgufWriter::set_bool(const std::string& key, bool v) { set(key, meta_bool(v)); }

void GgufWriter::set_string_array(const std::string& key, const std::vector<std::string>& v) {
  set(key, meta_string_array(v));
}
void GgufWriter::set_f32_array(const std::string& key, const std::vector<float>& v) { set(key, meta_f32_array(v)); }
void GgufWriter::set_i32_array(const std::string& key, const std::vector<int32_t>& v) { set(key, meta_i32_array(v)); }

void GgufWriter::add_tensor(const std::string& name, std::vector<int64_t> dims, DType dtype,
                            std::vector<uint8_t> data) {
  const size_t n = data.size();
  tensors_.push_back({name, std::move(dims), dtype, std::move(data), n, false});
}

void GgufWriter::declare_tensor(const std::string& name, std::vector<int64_t> dims, DType dtype) {
  KVLM_ASSERT(!dims.empty() && dims[0] % dtype_info(dtype).block_size == 0,
              "declare_tensor: row length is not a multiple of the block size");
  size_t n = row_bytes(dtype, dims[0]);
  for (size_t i = 1; i < dims.size(); ++i) n *= static_cast<size_t>(dims[i]);
  tensors_.push_back({name, std::move(dims), dtype, {}, n, true});
}

std::vector<uint8_t> GgufWriter::header_bytes() const {
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
    offset += (t.num_bytes + alignment_ - 1) / alignment_ * alignment_;
  }
  out.pad_to(alignment_);
  return std::move(out.bytes());
}

std::vector<uint8_t> GgufWriter::serialize() const {
  ByteSink out;
  out.append(header_bytes());
  for (const auto& t : tensors_) {
    KVLM_ASSERT(!t.declared, "serialize: a declared tensor needs write_streaming()");
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

uint64_t GgufWriter::write_streaming(const std::string& path, const TensorProducer& produce) const {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!f) throw_error(ErrorCode::kInvalidArgument, "cannot write '{}': {}", path, std::strerror(errno));
  uint64_t written = 0;
  auto put = [&](const uint8_t* data, size_t size) {
    if (size != 0 && std::fwrite(data, 1, size, f.get()) != size)
      throw_error(ErrorCode::kInvalidArgument, "failed writing '{}': {}", path, std::strerror(errno));
    written += size;
  };
  const std::vector<uint8_t> header = header_bytes();
  put(header.data(), header.size());
  const std::vector<uint8_t> zeros(alignment_, 0);
  size_t num_declared = 0;
  for (const auto& t : tensors_) {
    const uint64_t start = written;
    if (t.declared) {
      produce(num_declared++, put);
    } else {
      put(t.data.data(), t.data.size());
    }
    KVLM_ASSERT(written - start == t.num_bytes, "write_streaming: producer wrote the wrong number of bytes");
    put(zeros.data(), (alignment_ - written % alignment_) % alignment_);
  }
  if (std::fclose(f.release()) != 0)
    throw_error(ErrorCode::kInvalidArgument, "failed writing '{}': {}", path, std::strerror(errno));
  return written;
}

}  // namespace kvlm
