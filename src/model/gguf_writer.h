// Writes GGUF v3 files: metadata and tensors. Used by `kvlm make-model` and by
// tests that build small or deliberately broken files.
#pragma once

#include <cstdint>
#include <functional>
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

  // Declares a tensor whose bytes are produced later by write_streaming(), so
  // a large model is written without ever being held in memory whole. Its
  // size is row_bytes(dtype, dims[0]) times the product of the other dims.
  // Precondition: dims[0] is a multiple of dtype's block size.
  void declare_tensor(const std::string& name, std::vector<int64_t> dims, DType dtype);

  // The whole file as bytes. Precondition: no declared (streamed) tensors.
  std::vector<uint8_t> serialize() const;
  // Writes serialize() to `path`; throws Error(kInvalidArgument) on I/O failure.
  void write(const std::string& path) const;

  // Receives a declared tensor's bytes, in order, in pieces of any size.
  using ByteSinkFn = std::function<void(const uint8_t* data, size_t size)>;
  // Called once per declared tensor, in declaration order; `index` counts
  // declared tensors only. It must pass exactly the tensor's size to `sink`.
  using TensorProducer = std::function<void(size_t index, const ByteSinkFn& sink)>;
  // Writes the header, then every tensor in order: added tensors from their
  // stored bytes, declared ones from `produce`. Throws Error(kInvalidArgument)
  // on I/O failure; a producer that passes the wrong byte count is a bug
  // (assert). Returns the file's size in bytes.
  uint64_t write_streaming(const std::string& path, const TensorProducer& produce) const;

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> dims;
    DType dtype;
    std::vector<uint8_t> data;
    size_t num_bytes = 0;  // data.size(), or the declared size
    bool declared = false;
  };
  // Header, metadata and tensor table, padded to the alignment.
  std::vector<uint8_t> header_bytes() const;

  uint64_t alignment_;
  Metadata metadata_;
  std::vector<Tensor> tensors_;
};


}  // namespace kvlm
