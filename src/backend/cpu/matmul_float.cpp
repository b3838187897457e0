// matmul kernels for float weights (F32, F16, BF16) against f32 activations.
// Half-precision weights are widened to f32 in registers; activations stay
// f32 (more accurate than ggml, which rounds activations to f16 for F16).
#include <cstring>

#include "backend/cpu/matmul_impl.h"
#include "backend/cpu/simd.h"
#include "backend/fp16.h"

namespace kvlm::cpu {
namespace {

// Tokens per tile: 2 rows x 4 tokens of accumulators plus two weight vectors
// and an activation vector fit the 16 ymm registers. With one token the two
// rows still give two independent FMA chains.
constexpr int kMaxTile = 4;

// Loaders: 8 weights as f32 lanes, or one weight as a scalar.
struct LoadF32 {
  static constexpr size_t kBytes = 4;
  static float scalar(const uint8_t* w, int64_t i) {
    float v;
    std::memcpy(&v, w + i * 4, 4);
    return v;
  }
#if KVLM_AVX2
  static __m256 vec(const uint8_t* w, int64_t i) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(w) + i);
  }
#endif
};

struct LoadF16 {
  static constexpr size_t kBytes = 2;
  static float scalar(const uint8_t* w, int64_t i) {
    uint16_t h;
    std::memcpy(&h, w + i * 2, 2);
    return simd::half_to_float(h);
  }
#if KVLM_AVX2
  static __m256 vec(const uint8_t* w, int64_t i) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + i * 2)));
  }
#endif
};

struct LoadBF16 {
  static constexpr size_t kBytes = 2;
  static float scalar(const uint8_t* w, int64_t i) {
    uint16_t h;
    std::memcpy(&h, w + i * 2, 2);
    return bf16_to_f32(h);
  }
#if KVLM_AVX2
  static __m256 vec(const uint8_t* w, int64_t i) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + i * 2));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
#endif
};

// out[r][c] = dot(w[r], x + c * n) for r < R, c < C.  w: R rows of n weights;
// x: [C, n] f32. Two rows per call load each activation vector once for both
// (at T = 16 the activations, not the weights, would otherwise saturate L2).
// Per (row, token) the sum order is fixed (one 8-lane accumulator, then the
// scalar tail), whatever R and C are: results are batch-invariant.
template <typename Load, int R, int C>
void dot_tile(const uint8_t* const* w, const float* x, int64_t n, float (*out)[kMaxTile]) {
  int64_t i = 0;
#if KVLM_AVX2
  __m256 acc[R][C];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) {
    __m256 wv[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) wv[r] = Load::vec(w[r], i);
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      const __m256 xv = _mm256_loadu_ps(x + c * n + i);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[r][c] = _mm256_fmadd_ps(wv[r], xv, acc[r][c]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) out[r][c] = simd::hsum(acc[r][c]);
#else
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) out[r][c] = 0.f;
#endif
  for (; i < n; ++i) {  // tail (and the whole row without AVX2)
    for (int r = 0; r < R; ++r) {
      const float wi = Load::scalar(w[r], i);
      for (int c = 0; c < C; ++c) out[r][c] += wi * x[c * n + i];
    }
  }
}

template <typename Load>
void run(const WeightMatrix& w, const MatmulActs& acts, int64_t row_begin, int64_t row_end,
         int64_t tok_begin, int64_t tok_end, float* y) {
  const int64_t n = w.cols;
  const size_t row_bytes = static_cast<size_t>(n) * Load::kBytes;
  const auto* base = static_cast<const uint8_t*>(w.data);
  float out[2][kMaxTile];
  for (int64_t r = row_begin; r < row_end; r += 2) {
    const uint8_t* rows[2] = {base + static_cast<size_t>(r) * row_bytes,
                              base + static_cast<size_t>(r + 1) * row_bytes};
    const int num_rows = r + 1 < row_end ? 2 : 1;
    for (int64_t t = tok_begin; t < tok_end; t += kMaxTile) {
      const int num = static_cast<int>(std::min<int64_t>(kMaxTile, tok_end - t));
      const float* x = acts.f32 + t * n;
      dispatch_tile<kMaxTile>(num, [&]<int C>() {
        if (num_rows == 2) {
          dot_tile<Load, 2, C>(rows, x, n, out);
        } else {
          dot_tile<Load, 1, C>(rows, x, n, out);
        }
      });
      for (int k = 0; k < num_rows; ++k)
        for (int c = 0; c < num; ++c) y[(t + c) * w.rows + r + k] = out[k][c];
    }
  }
}

}  // namespace

void kernel_f32(const WeightMatrix& w, const MatmulActs& a, int64_t r0, int64_t r1, int64_t t0,
                int64_t t1, float* y) {
  run<LoadF32>(w, a, r0, r1, t0, t1, y);
}

void kernel_f16(const WeightMatrix& w, const MatmulActs& a, int64_t r0, int64_t r1, int64_t t0,
                int64_t t1, float* y) {
  run<LoadF16>(w, a, r0, r1, t0, t1, y);
}

void kernel_bf16(const WeightMatrix& w, const MatmulActs& a, int64_t r0, int64_t r1, int64_t t0,
                 int64_t t1, float* y) {
  run<LoadBF16>(w, a, r0, r1, t0, t1, y);
}

}  // namespace kvlm::cpu
