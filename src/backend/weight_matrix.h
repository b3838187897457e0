// A weight matrix as the model holds it and every backend's matmul takes it:
// a view of the GGUF's bytes, plus the backend's own copy when it made one
// (Backend::prepare_matrix).
#pragma once

#include <cstdint>
#include <memory>

#include "backend/dtype.h"

namespace kvlm {

// A backend's own copy of a matrix, in the layout its kernels read (the
// CPU's: PackedWeights, backend/cpu/matmul_impl.h). Opaque to the model;
// only the backend that made it reads it, so each backend derives its own
// and no model code changes when one is added.
struct PreparedMatrix {
  virtual ~PreparedMatrix() = default;
};

// A weight matrix as GGUF stores it: `rows` rows (output features) of `cols`
// elements (input features, contiguous, a multiple of the block size) of `dtype`.
struct WeightMatrix {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  // Optional copy of `data` in the backend's layout (Backend::prepare_matrix).
  // When set, matmul reads it instead of `data`; get_row always reads `data`.
  // shared_ptr because WeightMatrix is a copyable view: a model whose output
  // head is its embedding table holds two copies of one matrix.
  std::shared_ptr<const PreparedMatrix> packed;
};

// One matrix of a matmul_many and its output, [num_tokens, w->rows].
struct MatmulJob {
  const WeightMatrix* w;
  float* y;
};

// One matmul of a matmul_grouped: its own matrix, input and output.
// x: [num_tokens, w->cols]; y: [num_tokens, w->rows], overwritten.
struct GroupedMatmulJob {
  const WeightMatrix* w;
  const float* x;
  int64_t num_tokens;
  float* y;
};

}  // namespace kvlm
