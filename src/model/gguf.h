// GGUF reader (versions 2 and 3), memory-mapped. Every count, size and offset
// in the file is checked before it is used: a truncated, corrupt or hostile
// file is refused with Error(kCorrupt) naming the byte offset and the reason,
// never an out-of-bounds read. Tensor data is used in place from the mapping.
//
// Layout: magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv | n_kv x
// (string key, u32 type, value) | n_tensors x (string name, u32 n_dims,
// u64 dims[n_dims], u32 ggml_type, u64 offset) | padding to alignment | data.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "backend/dtype.h"
#include "common/mapped_file.h"
#include "common/metadata.h"

namespace kvlm {

struct GgufTensor {
  std::string name;
  std::vector<int64_t> dims;   // ggml order: dims[0] is the contiguous (row) length
  DType dtype = DType::kF32;
  uint64_t offset = 0;         // from the start of the data section
  const uint8_t* data = nullptr;  // inside the mapping
  size_t num_bytes = 0;
  int64_t num_elements() const;
  std::string shape_string() const;  // "[64, 512]"
};

class GgufFile {
 public:
  // Opens and validates `path`. Throws Error(kNotFound) for a missing file,
  // Error(kCorrupt) "path: offset N: reason" for a malformed one, and
  // Error(kUnsupported) for a tensor type kvlm cannot read.
  static std::unique_ptr<GgufFile> open(const std::string& path);

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  const std::string& path() const { return file_->path(); }
  size_t file_size() const { return file_->size(); }

  const Metadata& metadata() const { return metadata_; }
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find_tensor(std::string_view name) const;
  // Throws Error(kCorrupt) "missing tensor 'name'" when absent.
  const GgufTensor& require_tensor(std::string_view name) const;

 private:
  GgufFile() = default;
  std::unique_ptr<MappedFile> file_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  Metadata metadata_;
  std::vector<GgufTensor> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
  friend class GgufParser;
};

}  // namespace kvlm
