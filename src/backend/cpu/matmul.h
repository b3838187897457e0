// Matrix multiplication of activations by a weight matrix of any DType:
//   y[t][o] = sum_i w[o][i] * x[t][i]      for t < num_tokens, o < w.rows
// This is the hot loop of the forward pass; batching tokens lets each weight
// row be read once per step instead of once per token.
#pragma once

#include <cstdint>

#include "backend/dtype.h"

namespace kvlm {

// A weight matrix as GGUF stores it: `rows` rows (output features) of `cols`
// elements (input features, contiguous, a multiple of the block size) of `dtype`.
struct WeightMatrix {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
};

// x: [num_tokens, w.cols] f32, row-major, contiguous.
// y: [num_tokens, w.rows] f32, row-major, contiguous; overwritten.
// Multithreaded over output rows (backend/threads.h). For quantized weights the
// activations are quantized per row as ggml does (Q8_0 for Q8_0/Q4_0, Q8_K for
// Q4_K/Q6_K; with the rounding of ggml's reference quantizers) and dotted with
// integer arithmetic.
// Batch invariance: y[t] depends only on x[t] and w, bit for bit; not on
// num_tokens, the other tokens, or the thread count. So a sequence decoded
// alone or inside any batch gets identical logits.
// Scratch for quantized activations is kept per calling thread and reused.
void matmul(const WeightMatrix& w, const float* x, int64_t num_tokens, float* y);

// Plain scalar reference of the same computation, the oracle for matmul():
// same activation quantization, no SIMD, single thread.
void matmul_reference(const WeightMatrix& w, const float* x, int64_t num_tokens, float* y);

// One row of a weight matrix (an embedding lookup) dequantized into f32.
void get_row(const WeightMatrix& w, int64_t row, float* out);

}  // namespace kvlm
