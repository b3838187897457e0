// Writes GGUF v3 files: metadata and tensors. Used by `kvlm make-model` and by
// tests that build small or deliberately broken files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/dtype.h"
#include "common/metadata.h"

namespace kvlm {

class GgufWriter {
 public:
  explicit GgufWriter(uint64_t alignment = 32) : alignment_(alignment) {}

  void set(const std::string& key, MetaValue value) { metadata_.set(key, std::move(value)); }
  void set_string(const std::string& key, std::string v);
  void set_u32(const std::string& key, uint32_t v);
  void set_f32(const std::string& key, float v);
  void set_bool(const std::string& key, bool v);
  void set_string_array(const std::string& key, const std::vector<std::string>& v);
  void set_f32_array(const std::string& key, const std::vector<float>& v);
  void set_i32_array(const std::string& key, const std::vector<int32_t>& v);

  // dims in ggml order (dims[0] = row length); `data` holds the row bytes of dtype.
  void add_tensor(const std::string& name, std::vector<int64_t> dims, DType dtype,
                  std::vector<uint8_t> data);

  // The whole file as bytes.
  std::vector<uint8_t> serialize() const;
  // Writes serialize() to `path`; throws Error(kInvalidArgument) on I/O failure.
  void write(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> dims;
    DType dtype;
    std::vector<uint8_t> data;
  };
  uint64_t alignment_;
  Metadata metadata_;
  std::vector<Tensor> tensors_;
};

// Builds a MetaValue from plain values (convenience for GgufWriter::set).
MetaValue meta_u32(uint32_t v);
MetaValue meta_i32(int32_t v);
MetaValue meta_f32(float v);
MetaValue meta_bool(bool v);
MetaValue meta_string(std::string v);

}  // namespace kvlm
