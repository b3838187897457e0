// Helpers of the LoRA tests (lora_*_test.cpp): a base model, matrices as
// F32, and HF's Q/K row order turned into GGUF's, written here from the
// rule in hf_checkpoint.h rather than taken from the loader under test.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/quant.h"
#include "backend/weight_matrix.h"
#include "model/config.h"
#include "model/gguf.h"
#include "support/test_support.h"

namespace kvlm::test {

struct LoraBase {
  std::unique_ptr<GgufFile> file;
  ModelConfig config;
};

inline LoraBase lora_base(std::unique_ptr<GgufFile> file) {
  LoraBase b;
  b.config = ModelConfig::from_metadata(file->metadata());
  b.file = std::move(file);
  return b;
}
inline LoraBase shared_lora_base(const std::string& rel) { return lora_base(GgufFile::open(shared_path(rel))); }

inline std::vector<float> floats_of(DType t, const uint8_t* data, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {  // one row a value: works for any float type
    dequantize_row(t, data + row_bytes(t, i), out.data() + i, 1);
  }
  return out;
}

inline std::vector<float> floats_of(const WeightMatrix& w) {
  const auto* f = static_cast<const float*>(w.data);
  return std::vector<float>(f, f + w.rows * w.cols);
}

// GGUF row 2i + half of head h is HF row h * head_dim + half * head_dim / 2 + i.
inline std::vector<float> hf_rows_to_gguf(const std::vector<float>& m, int64_t rows, int64_t cols, int64_t heads) {
  const int64_t hd = rows / heads;
  std::vector<float> out(m.size());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t h = r / hd, j = r % hd, i = j / 2, half = j % 2;
    const int64_t from = h * hd + half * (hd / 2) + i;
    for (int64_t c = 0; c < cols; ++c) out[static_cast<size_t>(r * cols + c)] = m[static_cast<size_t>(from * cols + c)];
  }
  return out;
}

}  // namespace kvlm::test
