// safetensors, Hugging Face's weight format, read in place from a mapping:
//   u64 little-endian N | N bytes of JSON | the tensors' bytes
// where the JSON maps each tensor name to {"dtype": "BF16", "shape": [rows,
// cols], "data_offsets": [begin, end]} (offsets from the end of the header)
// and may hold a "__metadata__" object of strings. Shapes are row-major:
// shape[0] is the outermost dimension, the reverse of GGUF's dims.
//
// Every offset, size and shape is checked before use, as the GGUF reader
// does: a truncated or hostile file is refused with Error(kCorrupt) naming
// the file and the tensor, never read out of bounds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "backend/dtype.h"
#include "common/mapped_file.h"

namespace kvlm {

struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::kF32;     // F32, F16 or BF16
  std::vector<int64_t> shape;    // row-major, outermost first; empty for a scalar
  const uint8_t* data = nullptr; // inside the mapping
  size_t num_bytes = 0;
  int64_t num_elements() const;
};

class SafetensorsFile {
 public:
  // Maps and validates `path`. Throws Error(kNotFound) for a missing file,
  // Error(kCorrupt) for a malformed one, and Error(kUnsupported) naming the
  // tensor and its dtype for a type other than F32, F16 and BF16.
  static std::unique_ptr<SafetensorsFile> open(const std::string& path);

  const std::string& path() const { return file_->path(); }
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* find(std::string_view name) const;

 private:
  SafetensorsFile() = default;
  std::unique_ptr<MappedFile> file_;
  std::vector<SafetensorsTensor> tensors_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace kvlm
