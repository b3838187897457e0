// Matrix multiplication of activations by a weight matrix of any DType:
//   y[t][o] = sum_i w[o][i] * x[t][i]      for t < num_tokens, o < w.rows
// This is the hot loop of the forward pass; batching tokens lets each weight
// row be read once per step instead of once per token.
#pragma once

#include <cstdint>
#include <span>

#include "backend/dtype.h"
#include "backend/weight_matrix.h"

namespace kvlm {

// Returns w with `packed` set (on 2 MiB pages) for the dtypes whose kernels
// have a packed layout: all of them on the SIMD paths (F32, F16, BF16, Q8_0,
// Q4_0, Q4_K, Q6_K), none on the scalar path.
// Costs about the matrix's own size in memory, once, at load time; matmul on
// an unpacked matrix packs 8 rows at a time on the fly instead, which costs
// time at small num_tokens. Results are bit for bit the same either way.
WeightMatrix pack_for_matmul(WeightMatrix w);

// x: [num_tokens, w.cols] f32, row-major, contiguous.
// y: [num_tokens, w.rows] f32, row-major, contiguous; overwritten.
// Multithreaded over output rows (backend/threads.h). For quantized weights the
// activations are quantized per row as ggml does (Q8_0 for Q8_0/Q4_0, Q8_K for
// Q4_K/Q6_K; with the rounding of ggml's reference quantizers) and dotted with
// integer arithmetic.
// Batch invariance: y[t] depends only on x[t] and w, bit for bit; not on
// num_tokens, the other tokens, the thread count, or whether w is packed. So a
// sequence decoded alone or inside any batch gets identical logits.
// Scratch for quantized activations is kept per calling thread and reused.
void matmul(const WeightMatrix& w, const float* x, int64_t num_tokens, float* y);

// matmul() of one input by several matrices (a layer's q, k and v, or its
// gate and up): the input is quantized once and all the matrices' rows share
// one fork of the compute threads, so a small batch pays one barrier, not
// three. Each y is bit for bit what matmul() gives. Matrices whose kernels
// take the input in different forms (or more than 4) go one at a time.
void matmul_many(std::span<const MatmulJob> jobs, const float* x, int64_t num_tokens);

// Independent matmuls (each its own matrix and input) on one fork of the
// compute threads, their row chunks shared out together: a step's many small
// LoRA products cost one barrier, not one each. Each y is bit for bit what
// matmul() gives. Matrices whose kernels take quantized inputs go one at a time.
void matmul_grouped(std::span<const GroupedMatmulJob> jobs);

// Plain scalar reference of the same computation, the oracle for matmul():
// same activation quantization, no SIMD, single thread.
void matmul_reference(const WeightMatrix& w, const float* x, int64_t num_tokens, float* y);

// One row of a weight matrix (an embedding lookup) dequantized into f32.
void get_row(const WeightMatrix& w, int64_t row, float* out);

}  // namespace kvlm
