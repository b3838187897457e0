// matmul kernels for the 32-value block types (Q8_0, Q4_0) against Q8_0
// activations: integer dot product per block, scaled by d_w * d_x in f32.
#include "backend/cpu/matmul_impl.h"
#include "backend/cpu/simd.h"
#include "backend/quant.h"

namespace kvlm::cpu {
namespace {

constexpr int kMaxTile = 4;
// Blocks alternate between two accumulators per token (hides the FMA latency
// with one token); fixed for every tile size so results are batch-invariant.
constexpr int kUnroll = 2;

// Unpacks one weight block into 32 signed quants (scalar form).
inline void unpack_block(const BlockQ8_0& b, int8_t* q) {
  for (int j = 0; j < 32; ++j) q[j] = b.qs[j];
}
inline void unpack_block(const BlockQ4_0& b, int8_t* q) {
  for (int j = 0; j < 16; ++j) {
    q[j] = static_cast<int8_t>((b.qs[j] & 0xF) - 8);
    q[j + 16] = static_cast<int8_t>((b.qs[j] >> 4) - 8);
  }
}

#if KVLM_AVX2
inline __m256i unpack_block_vec(const BlockQ8_0& b) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs));
}
// Bytes 0-15 take the low nibbles (values 0-15), bytes 16-31 the high nibbles.
inline __m256i unpack_block_vec(const BlockQ4_0& b) {
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed);
  const __m256i nibbles = _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
  return _mm256_sub_epi8(nibbles, _mm256_set1_epi8(8));
}
#endif

// out[c] = dot(weight row, activation row t0 + c) for c < C.
template <typename Block, int C>
void dot_tile(const Block* w, const MatmulActs& a, int64_t t0, float* out) {
  const int64_t cols = a.cols;
  const int64_t num_blocks = cols / 32;
  const int8_t* xq[C];
  const float* xd[C];
  for (int c = 0; c < C; ++c) {
    xq[c] = a.q8_qs + (t0 + c) * cols;
    xd[c] = a.q8_d + (t0 + c) * num_blocks;
  }
#if KVLM_AVX2
  __m256 acc[kUnroll][C];
#pragma GCC unroll 8
  for (int u = 0; u < kUnroll; ++u)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[u][c] = _mm256_setzero_ps();
  auto block = [&](int64_t b, int u) {
    const __m256i wq = unpack_block_vec(w[b]);
    const __m256i aw = _mm256_sign_epi8(wq, wq);
    const __m256 dw = _mm256_set1_ps(simd::half_to_float(w[b].d));
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq[c] + b * 32));
      const __m256 dot = _mm256_cvtepi32_ps(simd::dot_i8_pairs(aw, wq, xv));
      acc[u][c] = _mm256_fmadd_ps(dot, _mm256_mul_ps(dw, _mm256_broadcast_ss(xd[c] + b)), acc[u][c]);
    }
  };
  int64_t b = 0;
  for (; b + kUnroll <= num_blocks; b += kUnroll) {
#pragma GCC unroll 2
    for (int u = 0; u < kUnroll; ++u) block(b + u, u);
  }
  for (; b < num_blocks; ++b) block(b, 0);
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) {
    acc[0][c] = _mm256_add_ps(acc[0][c], acc[1][c]);
    out[c] = simd::hsum(acc[0][c]);
  }
#else
  for (int c = 0; c < C; ++c) out[c] = 0.f;
  int8_t q[32];
  for (int64_t b = 0; b < num_blocks; ++b) {
    unpack_block(w[b], q);
    const float dw = simd::half_to_float(w[b].d);
    for (int c = 0; c < C; ++c) {
      int sum = 0;
      for (int j = 0; j < 32; ++j) sum += q[j] * xq[c][b * 32 + j];
      out[c] += static_cast<float>(sum) * (dw * xd[c][b]);
    }
  }
#endif
}

template <typename Block>
void run(const WeightMatrix& w, const MatmulActs& acts, int64_t row_begin, int64_t row_end,
         int64_t tok_begin, int64_t tok_end, float* y) {
  const size_t row_bytes = static_cast<size_t>(w.cols / 32) * sizeof(Block);
  for_each_row_tile<kMaxTile>(
      w, row_bytes, row_begin, row_end, tok_begin, tok_end, y,
      [&](int num, const uint8_t* row, int64_t t, float* out) {
        const auto* blocks = reinterpret_cast<const Block*>(row);
        dispatch_tile<kMaxTile>(num, [&]<int C>() { dot_tile<Block, C>(blocks, acts, t, out); });
      });
}

}  // namespace

void kernel_q8_0(const WeightMatrix& w, const MatmulActs& a, int64_t r0, int64_t r1, int64_t t0,
                 int64_t t1, float* y) {
  run<BlockQ8_0>(w, a, r0, r1, t0, t1, y);
}

void kernel_q4_0(const WeightMatrix& w, const MatmulActs& a, int64_t r0, int64_t r1, int64_t t0,
                 int64_t t1, float* y) {
  run<BlockQ4_0>(w, a, r0, r1, t0, t1, y);
}

}  // namespace kvlm::cpu
