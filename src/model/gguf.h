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
#include <utility>
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
  const uint8_t* data = nullptr;  // inside the mapping (slices[0] when slices is set)
  size_t num_bytes = 0;
  // A tensor whose bytes are not contiguous: one pointer per slice along its
  // outermost dimension, each num_bytes / slices.size() bytes. A Hugging Face
  // checkpoint stores each expert apart; its expert stacks are such tensors,
  // so they are used from the mapping instead of being copied into one.
  // Empty: the bytes are contiguous at data.
  std::vector<const uint8_t*> slices;
  int64_t num_elements() const;
  std::string shape_string() const;  // "[64, 512]"
  // Slice i of `n` equal slices along the outermost dimension (a row range,
  // an expert). Precondition: n divides the outermost dimension, and equals
  // slices.size() when slices is set.
  const uint8_t* slice(int64_t i, int64_t n) const;
  // The tensor's bytes in order: one range, or one per slice.
  std::vector<std::pair<const uint8_t*, size_t>> byte_ranges() const;
};

// What keeps the tensor bytes of a file built in memory alive (the mappings
// they point into, the bytes a conversion made). Owned by the GgufFile.
struct TensorOwner {
  virtual ~TensorOwner() = default;
};

class GgufFile {
 public:
  // Opens and validates `path`. Throws Error(kNotFound) for a missing file,
  // Error(kCorrupt) "path: offset N: reason" for a malformed one, and
  // Error(kUnsupported) for a tensor type kvlm cannot read.
  static std::unique_ptr<GgufFile> open(const std::string& path);
  // A file built in memory: the GGUF another model format converts to (a
  // Hugging Face checkpoint, model/hf_checkpoint.h), or a file's tensors
  // converted (model/quantize_tensors.h). `source` names it in messages;
  // `owner` keeps the tensors' bytes alive. Throws Error(kCorrupt) for a
  // duplicate tensor name.
  static std::unique_ptr<GgufFile> from_parts(std::string source, Metadata metadata,
                                              std::vector<GgufTensor> tensors, std::unique_ptr<TensorOwner> owner);

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  const std::string& path() const { return path_; }
  size_t file_size() const { return file_ ? file_->size() : 0; }  // 0: built in memory

  const Metadata& metadata() const { return metadata_; }
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find_tensor(std::string_view name) const;
  // Throws Error(kCorrupt) "missing tensor 'name'" when absent.
  const GgufTensor& require_tensor(std::string_view name) const;

 private:
  GgufFile() = default;
  std::string path_;
  std::unique_ptr<MappedFile> file_;         // null for a file built in memory
  std::unique_ptr<TensorOwner> owner_;       // set for a file built in memory
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  Metadata metadata_;
  std::vector<GgufTensor> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
  friend class GgufParser;
};

}  // namespace kvlm
