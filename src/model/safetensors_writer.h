// Writes safetensors files (the layout safetensors.h reads): used by
// `kvlm make-lora` for PEFT adapters, and by tests.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "backend/dtype.h"

namespace kvlm {

class SafetensorsWriter {
 public:
  // `shape` row-major, outermost first; `data` holds the elements of `dtype`
  // (F32, F16 or BF16) in that order. Precondition: the sizes agree and the
  // name is new (asserts: callers build these from their own shapes).
  void add(const std::string& name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> data);
  // A "__metadata__" string entry (PEFT writes {"format": "pt"}).
  void set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }

  // u64 LE header length | JSON header, padded with spaces to 8 bytes as
  // the Python writer pads it | the tensors in the order added.
  std::vector<uint8_t> serialize() const;
  // Throws Error(kInvalidArgument) naming the path when it cannot be written.
  void write(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> data;
  };
  std::vector<Tensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace kvlm
