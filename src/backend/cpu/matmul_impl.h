// Internals of matmul(): the activation formats prepared once per call and
// the per-dtype kernels that compute a block of rows x tokens. Not a public
// API; only backend/cpu/matmul*.cpp include it.
#pragma once

#include <algorithm>
#include <cstdint>

#include "backend/cpu/matmul.h"

namespace kvlm::cpu {

// Q8_K activations as the K-quant kernels want them: the quants first (32-byte
// aligned), the per-16 sums (Q6_K's -32 offset), the per-32 sums (Q4_K's mins)
// and the f32 scale. Values equal those of quantize_row(kQ8_K).
struct alignas(32) ActBlockQ8K {
  int8_t qs[256];
  int16_t bsums[16];       // sum of qs[16 g .. 16 g + 15]
  int16_t bsum_pairs[8];   // sum of qs[32 j .. 32 j + 31]
  float d;
};

// Activations of one call, converted once and shared by every thread.
// Exactly one representation is set, chosen by the weight dtype.
struct MatmulActs {
  int64_t cols = 0;
  const float* f32 = nullptr;        // F32/F16/BF16 weights: [num_tokens, cols]
  const int8_t* q8_qs = nullptr;     // Q8_0/Q4_0 weights: [num_tokens, cols] quants
  const float* q8_d = nullptr;       //   [num_tokens, cols / 32] scales (fp16-rounded, as f32)
  const ActBlockQ8K* q8k = nullptr;  // Q4_K/Q6_K weights: [num_tokens, cols / 256]
};

// Quantizes one activation row exactly as quantize_row(kQ8_0 / kQ8_K) would
// (same rounding, bit for bit), into the layouts above.
void quantize_act_q8_0(const float* x, int64_t cols, int8_t* qs, float* d);
void quantize_act_q8_k(const float* x, int64_t cols, ActBlockQ8K* out);

// Computes y[t][r] for rows [row_begin, row_end) and tokens [tok_begin, tok_end):
// each weight row is read once from memory and dotted with the tokens in tiles.
// y: [num_tokens, w.rows].
using RowRangeKernel = void (*)(const WeightMatrix& w, const MatmulActs& acts, int64_t row_begin,
                                int64_t row_end, int64_t tok_begin, int64_t tok_end, float* y);

void kernel_f32(const WeightMatrix&, const MatmulActs&, int64_t, int64_t, int64_t, int64_t, float*);
void kernel_f16(const WeightMatrix&, const MatmulActs&, int64_t, int64_t, int64_t, int64_t, float*);
void kernel_bf16(const WeightMatrix&, const MatmulActs&, int64_t, int64_t, int64_t, int64_t, float*);
void kernel_q8_0(const WeightMatrix&, const MatmulActs&, int64_t, int64_t, int64_t, int64_t, float*);
void kernel_q4_0(const WeightMatrix&, const MatmulActs&, int64_t, int64_t, int64_t, int64_t, float*);
void kernel_q4_k(const WeightMatrix&, const MatmulActs&, int64_t, int64_t, int64_t, int64_t, float*);
void kernel_q6_k(const WeightMatrix&, const MatmulActs&, int64_t, int64_t, int64_t, int64_t, float*);

// Drives a tile function over rows x tokens: rows outer, so a weight row stays
// in L1 while every tile of tokens uses it. tile<C>(row_ptr, first_token, out)
// computes out[c] for the C tokens starting at first_token.
template <int kMaxTile, typename TileFn>
inline void for_each_row_tile(const WeightMatrix& w, size_t row_bytes, int64_t row_begin,
                              int64_t row_end, int64_t tok_begin, int64_t tok_end, float* y,
                              TileFn&& tile) {
  const auto* base = static_cast<const uint8_t*>(w.data);
  float out[kMaxTile];
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint8_t* row = base + static_cast<size_t>(r) * row_bytes;
    for (int64_t t = tok_begin; t < tok_end; t += kMaxTile) {
      const int n = static_cast<int>(std::min<int64_t>(kMaxTile, tok_end - t));
      tile(n, row, t, out);
      for (int c = 0; c < n; ++c) y[(t + c) * w.rows + r] = out[c];
    }
  }
}

// Calls fn.template operator()<C>() with C = n, for a runtime tile size n in
// [1, kMax]; only those kMax instantiations are compiled.
template <int kMax, int C = 1, typename Fn>
inline void dispatch_tile(int n, Fn&& fn) {
  if constexpr (C >= kMax) {
    fn.template operator()<kMax>();
  } else {
    if (n == C) {
      fn.template operator()<C>();
    } else {
      dispatch_tile<kMax, C + 1>(n, fn);
    }
  }
}

}  // namespace kvlm::cpu
