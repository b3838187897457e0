// matmul kernels for the K-quant weight types (Q4_K, Q6_K) against Q8_K
// activations. Per 256-value super-block the integer part is exact:
//   Q4_K: d dx sum_j sc_j (q_j . x_j)  -  dmin dx sum_j m_j sum(x_j)   (j: 8 groups of 32)
//   Q6_K: d dx sum_g sc_g ((q_g - 32) . x_g)                           (g: 16 groups of 16)
// and only the two products with d, dmin are done in f32.
#include "backend/cpu/matmul_impl.h"
#include "backend/cpu/simd.h"
#include "backend/quant.h"
#include "backend/quant_impl.h"

namespace kvlm::cpu {
namespace {

// Tokens per tile: per token one integer and one f32 accumulator, plus the
// unpacked weights, must stay in the 16 ymm registers.
constexpr int kMaxTile = 4;

template <int C>
void dot_tile_q4_k(const BlockQ4_K* w, const MatmulActs& a, int64_t t0, float* out) {
  const int64_t num_blocks = a.cols / 256;
  const ActBlockQ8K* xs[C];
  for (int c = 0; c < C; ++c) xs[c] = a.q8k + (t0 + c) * num_blocks;
#if KVLM_AVX2
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  __m256 acc[C];
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t b = 0; b < num_blocks; ++b) {
    const BlockQ4_K& blk = w[b];
    uint8_t sc[8];
    uint8_t mn[8];
    detail::unpack_q4_k_scales(blk.scales, sc, mn);
    __m256i isum[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) isum[c] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {  // 64 values: 32 low nibbles (group 2k), 32 high (2k+1)
      const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs + 32 * k));
      const __m256i q_lo = _mm256_and_si256(bytes, low4);
      const __m256i q_hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4);
      const __m256i s_lo = _mm256_set1_epi16(sc[2 * k]);
      const __m256i s_hi = _mm256_set1_epi16(sc[2 * k + 1]);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) {
        const int8_t* xq = xs[c][b].qs + 64 * k;
        const __m256i p_lo = _mm256_maddubs_epi16(q_lo, _mm256_load_si256(reinterpret_cast<const __m256i*>(xq)));
        const __m256i p_hi = _mm256_maddubs_epi16(q_hi, _mm256_load_si256(reinterpret_cast<const __m256i*>(xq + 32)));
        isum[c] = _mm256_add_epi32(isum[c], _mm256_add_epi32(_mm256_madd_epi16(p_lo, s_lo), _mm256_madd_epi16(p_hi, s_hi)));
      }
    }
    const float d = simd::half_to_float(blk.d);
    const float dmin = simd::half_to_float(blk.dmin);
    const __m128i mins16 = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(mn)));
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      const ActBlockQ8K& x = xs[c][b];
      const __m128i m = _mm_madd_epi16(mins16, _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.bsum_pairs)));
      acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), _mm256_set1_ps(d * x.d), acc[c]);
      acc[c] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(_mm256_zextsi128_si256(m)), _mm256_set1_ps(dmin * x.d), acc[c]);
    }
  }
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c) out[c] = simd::hsum(acc[c]);
#else
  for (int c = 0; c < C; ++c) out[c] = 0.f;
  for (int64_t b = 0; b < num_blocks; ++b) {
    const BlockQ4_K& blk = w[b];
    uint8_t sc[8];
    uint8_t mn[8];
    detail::unpack_q4_k_scales(blk.scales, sc, mn);
    const float d = simd::half_to_float(blk.d);
    const float dmin = simd::half_to_float(blk.dmin);
    for (int c = 0; c < C; ++c) {
      const ActBlockQ8K& x = xs[c][b];
      int sumi = 0;
      int summ = 0;
      for (int j = 0; j < 8; ++j) {
        const uint8_t* q = blk.qs + 32 * (j / 2);
        const int shift = (j % 2) * 4;
        int dot = 0;
        for (int l = 0; l < 32; ++l) dot += ((q[l] >> shift) & 0xF) * x.qs[32 * j + l];
        sumi += sc[j] * dot;
        summ += mn[j] * x.bsum_pairs[j];
      }
      out[c] += d * x.d * static_cast<float>(sumi) - dmin * x.d * static_cast<float>(summ);
    }
  }
#endif
}

template <int C>
void dot_tile_q6_k(const BlockQ6_K* w, const MatmulActs& a, int64_t t0, float* out) {
  const int64_t num_blocks = a.cols / 256;
  const ActBlockQ8K* xs[C];
  for (int c = 0; c < C; ++c) xs[c] = a.q8k + (t0 + c) * num_blocks;
#if KVLM_AVX2
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i bits45 = _mm256_set1_epi8(0x30);
  __m256 acc[C];
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t b = 0; b < num_blocks; ++b) {
    const BlockQ6_K& blk = w[b];
    __m256i isum[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) isum[c] = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {  // two halves of 128 values
      const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.ql + 64 * h));
      const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.ql + 64 * h + 32));
      const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qh + 32 * h));
      // Values 32g .. 32g+31 of the half: a low or high nibble of ql plus 2 bits of qh.
      const __m256i q[4] = {
          _mm256_or_si256(_mm256_and_si256(l0, low4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), bits45)),
          _mm256_or_si256(_mm256_and_si256(l1, low4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), bits45)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4), _mm256_and_si256(hb, bits45)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                          _mm256_and_si256(_mm256_srli_epi16(hb, 2), bits45)),
      };
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) {
        // maddubs lanes 0-7 hold values 0-15 (scale 2g), lanes 8-15 values 16-31 (scale 2g+1).
        const int8_t* s = blk.scales + 8 * h + 2 * g;
        const __m256i sv = _mm256_set_m128i(_mm_set1_epi16(s[1]), _mm_set1_epi16(s[0]));
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) {
          const auto* xq = reinterpret_cast<const __m256i*>(xs[c][b].qs + 128 * h + 32 * g);
          const __m256i p = _mm256_maddubs_epi16(q[g], _mm256_load_si256(xq));
          isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(p, sv));
        }
      }
    }
    // The stored quants are q + 32: subtract 32 * sum_g sc_g * sum(x_g).
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales)));
    const float d = simd::half_to_float(blk.d);
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      const ActBlockQ8K& x = xs[c][b];
      const __m256i bias = _mm256_madd_epi16(sc16, _mm256_load_si256(reinterpret_cast<const __m256i*>(x.bsums)));
      const __m256i total = _mm256_sub_epi32(isum[c], _mm256_slli_epi32(bias, 5));
      acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(total), _mm256_set1_ps(d * x.d), acc[c]);
    }
  }
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c) out[c] = simd::hsum(acc[c]);
#else
  for (int c = 0; c < C; ++c) out[c] = 0.f;
  int8_t q[256];
  for (int64_t b = 0; b < num_blocks; ++b) {
    const BlockQ6_K& blk = w[b];
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = blk.ql + 64 * h;
      const uint8_t* qh = blk.qh + 32 * h;
      int8_t* qo = q + 128 * h;
      for (int l = 0; l < 32; ++l) {
        qo[l] = static_cast<int8_t>(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
        qo[l + 32] = static_cast<int8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
        qo[l + 64] = static_cast<int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
        qo[l + 96] = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
      }
    }
    const float d = simd::half_to_float(blk.d);
    for (int c = 0; c < C; ++c) {
      const ActBlockQ8K& x = xs[c][b];
      int sumi = 0;
      for (int g = 0; g < 16; ++g) {
        int dot = 0;
        for (int l = 0; l < 16; ++l) dot += q[16 * g + l] * x.qs[16 * g + l];
        sumi += blk.scales[g] * dot;
      }
      out[c] += d * x.d * static_cast<float>(sumi);
    }
  }
#endif
}

template <typename Block, typename Tile>
void run(const WeightMatrix& w, const MatmulActs& acts, int64_t row_begin, int64_t row_end,
         int64_t tok_begin, int64_t tok_end, float* y, Tile tile) {
  const size_t row_bytes = static_cast<size_t>(w.cols / 256) * sizeof(Block);
  for_each_row_tile<kMaxTile>(w, row_bytes, row_begin, row_end, tok_begin, tok_end, y,
                              [&](int num, const uint8_t* row, int64_t t, float* out) {
                                tile(num, reinterpret_cast<const Block*>(row), t, out);
                              });
}

}  // namespace

void kernel_q4_k(const WeightMatrix& w, const MatmulActs& a, int64_t r0, int64_t r1, int64_t t0,
                 int64_t t1, float* y) {
  run<BlockQ4_K>(w, a, r0, r1, t0, t1, y, [&](int num, const BlockQ4_K* row, int64_t t, float* out) {
    dispatch_tile<kMaxTile>(num, [&]<int C>() { dot_tile_q4_k<C>(row, a, t, out); });
  });
}

void kernel_q6_k(const WeightMatrix& w, const MatmulActs& a, int64_t r0, int64_t r1, int64_t t0,
                 int64_t t1, float* y) {
  run<BlockQ6_K>(w, a, r0, r1, t0, t1, y, [&](int num, const BlockQ6_K* row, int64_t t, float* out) {
    dispatch_tile<kMaxTile>(num, [&]<int C>() { dot_tile_q6_k<C>(row, a, t, out); });
  });
}

}  // namespace kvlm::cpu
