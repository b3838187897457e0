// Activations quantized for the integer kernels (Q8_0 for Q8_0/Q4_0
// weights, Q8_K for Q4_K/Q6_K), exactly as quantize_row() would, bit for bit.
// Compiled once per CPU path like the kernels (matmul_impl.h): the plain
// compile holds the scalar twins, each ISA copy its own vector code.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cpu/matmul_impl.h"
#include "backend/cpu/simd.h"
#include "backend/fp16.h"
#include "backend/quant_impl.h"

namespace kvlm::cpu {
#ifdef KVLM_KERNEL_ISA
namespace KVLM_KERNEL_ISA {
#endif

namespace {

#if KVLM_AVX2
// Round half away from zero (C's roundf), the rounding of quantize_row_q8_0_ref.
[[maybe_unused]] inline __m256 round_half_away(__m256 v) {
  const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 frac = simd::abs_ps(_mm256_sub_ps(v, t));  // exact
  const __m256 up = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
  const __m256 one = _mm256_or_ps(_mm256_and_ps(v, _mm256_set1_ps(-0.f)), _mm256_set1_ps(1.f));
  return _mm256_add_ps(t, _mm256_and_ps(up, one));
}

// 32 int32 lanes (in four vectors, in order) -> 32 int8, saturating.
inline __m256i pack_to_i8(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_packs_epi32(a, b);
  const __m256i cd = _mm256_packs_epi32(c, d);
  // packs works per 128-bit lane; the permute puts the four groups back in order.
  return _mm256_permutevar8x32_epi32(_mm256_packs_epi16(ab, cd), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// _mm256_max_ps keeps or drops a NaN depending on operand order, so the max
// alone cannot tell whether a block is finite. v - v is 0 for finite lanes and
// NaN for NaN and +-Inf, and NaN survives addition: z stays all zeros exactly
// while every value seen is finite.
inline __m256 accumulate_nonfinite(__m256 z, __m256 v) { return _mm256_add_ps(z, _mm256_sub_ps(v, v)); }
inline bool any_nan(__m256 z) { return _mm256_movemask_ps(_mm256_cmp_ps(z, z, _CMP_UNORD_Q)) != 0; }
#endif

// One block of 32 activations: its quants (into qs, and into tile_qs too
// where that is set), its scale rounded through fp16 (the block stores d as
// fp16) and the quants' sum; `finite` false, and nothing written, if a
// value is NaN or infinite. The quants reach both copies from a register:
// the tile read back from qs would wait on the stores just made.
struct QuantizedBlock {
  bool finite;
  float d;
  int32_t sum;
};

#if KVLM_AVX2
inline int32_t hsum_epi32(__m256i s) {
  __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
  return _mm_cvtsi128_si32(s4);
}
#endif
#if KVLM_AVX2 && defined(__AVX512F__) && defined(__AVX512DQ__)
inline int32_t hsum_epi32(__m512i s) {
  return hsum_epi32(_mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1)));
}

// Two zmm registers, and the scale's fp16 rounding by F16C: both roundings
// are IEEE round-to-nearest-even, so the bits equal fp16_to_f32(f32_to_fp16()).
inline QuantizedBlock quantize_block_q8_0(const float* xb, int8_t* qs, int8_t* tile_qs) {
  const __m512 v0 = _mm512_loadu_ps(xb);
  const __m512 v1 = _mm512_loadu_ps(xb + 16);
  constexpr int kNanOrInf = 0x01 | 0x08 | 0x10 | 0x80;  // QNaN, +Inf, -Inf, SNaN
  if ((_mm512_fpclass_ps_mask(v0, kNanOrInf) | _mm512_fpclass_ps_mask(v1, kNanOrInf)) != 0) return {false, 0.f, 0};
  // (GCC 12's _mm512_reduce_* warn of an uninitialised operand; halves instead.)
  const __m512 m = _mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1));
  const float amax = simd::hmax(_mm256_max_ps(_mm512_castps512_ps256(m), _mm512_extractf32x8_ps(m, 1)));
  const float scale = amax / 127.f;
  const float id = scale != 0.f ? 1.f / scale : 0.f;
  const __m512 idv = _mm512_set1_ps(id);
  const __m512 half = _mm512_set1_ps(0.5f);
  __m512i q[2];
  for (int k = 0; k < 2; ++k) {
    // Round half away from zero (roundf): truncate, then step away from
    // zero where the dropped fraction (exact) is at least one half.
    const __m512 p = _mm512_mul_ps(k == 0 ? v0 : v1, idv);
    const __m512 t = _mm512_roundscale_ps(p, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __mmask16 up = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(p, t)), half, _CMP_GE_OQ);
    const __m512 away = _mm512_or_ps(_mm512_and_ps(p, _mm512_set1_ps(-0.f)), _mm512_set1_ps(1.f));
    q[k] = _mm512_cvtps_epi32(_mm512_mask_add_ps(t, up, t, away));
  }
  const __m256i q8 = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm512_cvtsepi32_epi8(q[0])),
                                             _mm512_cvtsepi32_epi8(q[1]), 1);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs), q8);
  if (tile_qs != nullptr) _mm256_storeu_si256(reinterpret_cast<__m256i*>(tile_qs), q8);
  // |q| <= 127: the sum is exact.
  return {true, _cvtsh_ss(_cvtss_sh(scale, _MM_FROUND_TO_NEAREST_INT)), hsum_epi32(_mm512_add_epi32(q[0], q[1]))};
}
#elif KVLM_AVX2
inline QuantizedBlock quantize_block_q8_0(const float* xb, int8_t* qs, int8_t* tile_qs) {
  __m256 v[4];
  for (int k = 0; k < 4; ++k) v[k] = _mm256_loadu_ps(xb + 8 * k);
  __m256 z = _mm256_setzero_ps();
  for (int k = 0; k < 4; ++k) z = accumulate_nonfinite(z, v[k]);
  // Checked apart from the max, which may drop a NaN (max_ps keeps or drops one by operand order).
  if (any_nan(z)) return {false, 0.f, 0};
  const __m256 m = _mm256_max_ps(_mm256_max_ps(simd::abs_ps(v[0]), simd::abs_ps(v[1])),
                                 _mm256_max_ps(simd::abs_ps(v[2]), simd::abs_ps(v[3])));
  const float scale = simd::hmax(m) / 127.f;
  const float id = scale != 0.f ? 1.f / scale : 0.f;
  const __m256 idv = _mm256_set1_ps(id);
  __m256i q[4];
  for (int k = 0; k < 4; ++k) q[k] = _mm256_cvtps_epi32(round_half_away(_mm256_mul_ps(v[k], idv)));
  const __m256i q8 = pack_to_i8(q[0], q[1], q[2], q[3]);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs), q8);
  if (tile_qs != nullptr) _mm256_storeu_si256(reinterpret_cast<__m256i*>(tile_qs), q8);
  // F16C's rounding is IEEE, as fp16_to_f32(f32_to_fp16()); |q| <= 127, so the int32 sum is exact.
  return {true, _cvtsh_ss(_cvtss_sh(scale, _MM_FROUND_TO_NEAREST_INT)),
          hsum_epi32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])))};
}
#else
inline QuantizedBlock quantize_block_q8_0(const float* xb, int8_t* qs, int8_t* tile_qs) {
  float amax = 0.f;
  for (int j = 0; j < 32; ++j) {
    if (!std::isfinite(xb[j])) return {false, 0.f, 0};
    amax = std::max(amax, std::fabs(xb[j]));
  }
  const float scale = amax / 127.f;
  const float id = scale != 0.f ? 1.f / scale : 0.f;
  int32_t sum = 0;
  for (int j = 0; j < 32; ++j) {
    qs[j] = static_cast<int8_t>(std::round(xb[j] * id));
    sum += qs[j];
  }
  if (tile_qs != nullptr) std::memcpy(tile_qs, qs, 32);
  return {true, fp16_to_f32(f32_to_fp16(scale)), sum};
}
#endif

}  // namespace

void quantize_act_q8_0(const float* x, int64_t cols, const ActQ8Out& out) {
  // Locals: through `out` the compiler would reload every pointer after each store.
  int8_t* const qs = out.qs;
  float* const d = out.d;
  int32_t* const sums = out.sums;
  ActBlockQ8Tile* const tiles = out.tiles;
  for (int64_t b = 0; b < cols / 32; ++b) {
    ActBlockQ8Tile* tile = tiles != nullptr ? tiles + b * out.tile_stride : nullptr;
    QuantizedBlock block = quantize_block_q8_0(x + 32 * b, qs + 32 * b, tile != nullptr ? tile->qs : nullptr);
    if (!block.finite) {
      // NaN/Inf input: quants 0 and d NaN, so the dot product is NaN rather
      // than a float-to-int overflow.
      std::fill(qs + 32 * b, qs + 32 * b + 32, int8_t{0});
      if (tile != nullptr) std::fill(tile->qs, tile->qs + 32, int8_t{0});
      block = {false, std::numeric_limits<float>::quiet_NaN(), 0};
    }
    d[b] = block.d;
    sums[b] = block.sum;
    if (tile != nullptr) set_act_tile_scales(*tile, block.d, block.sum);
  }
}

void quantize_act_q8_k(const float* x, int64_t cols, ActBlockQ8K* out) {
  const int64_t num_blocks = cols / 256;
  for (int64_t b = 0; b < num_blocks; ++b, x += 256) {
    ActBlockQ8K& o = out[b];
#if KVLM_AVX2
    __m256 m = _mm256_setzero_ps();
    __m256 z = _mm256_setzero_ps();
    for (int j = 0; j < 256; j += 8) {
      const __m256 v = _mm256_loadu_ps(x + j);
      m = _mm256_max_ps(m, simd::abs_ps(v));
      z = accumulate_nonfinite(z, v);
    }
    const float amax = any_nan(z) ? std::numeric_limits<float>::quiet_NaN() : simd::hmax(m);
#else
    float amax = 0.f;
    for (int j = 0; j < 256; ++j) amax = std::isfinite(x[j]) && std::isfinite(amax) ? std::max(amax, std::fabs(x[j]))
                                                                                  : std::numeric_limits<float>::quiet_NaN();
#endif
    // The reference keeps the first value of largest magnitude (its sign sets
    // iscale's). The search is bounded: with NaN or Inf among the activations
    // the SIMD max need not equal any |x[j]| (max_ps drops or keeps NaN by
    // operand order), and an unbounded walk would leave the block.
    int j_max = 0;
    while (j_max < 256 && std::fabs(x[j_max]) != amax) ++j_max;
    if (amax == 0.f || !std::isfinite(amax) || j_max == 256) {
      // All zeros, or non-finite input: quants 0 and d 0 (zeros) or NaN, so a
      // non-finite activation gives a NaN dot product instead of garbage.
      std::fill(std::begin(o.qs), std::end(o.qs), int8_t{0});
      std::fill(std::begin(o.bsums), std::end(o.bsums), int16_t{0});
      std::fill(std::begin(o.bsum_pairs), std::end(o.bsum_pairs), int16_t{0});
      o.d = amax == 0.f ? 0.f : std::numeric_limits<float>::quiet_NaN();
      continue;
    }
    const float iscale = -127.f / x[j_max];
#if KVLM_AVX2
    const __m256 isv = _mm256_set1_ps(iscale);
    const __m256i cap = _mm256_set1_epi32(127);
    for (int j = 0; j < 256; j += 32) {
      __m256i q[4];
      for (int k = 0; k < 4; ++k) {
        const __m256 v = _mm256_mul_ps(isv, _mm256_loadu_ps(x + j + 8 * k));
        q[k] = _mm256_min_epi32(cap, _mm256_cvtps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
      }
      _mm256_store_si256(reinterpret_cast<__m256i*>(o.qs + j), pack_to_i8(q[0], q[1], q[2], q[3]));
    }
#else
    for (int j = 0; j < 256; ++j) o.qs[j] = static_cast<int8_t>(std::min(127, detail::nearest_int(iscale * x[j])));
#endif
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += o.qs[16 * g + j];
      o.bsums[g] = static_cast<int16_t>(sum);
    }
    for (int j = 0; j < 8; ++j) o.bsum_pairs[j] = static_cast<int16_t>(o.bsums[2 * j] + o.bsums[2 * j + 1]);
    o.d = 1.f / iscale;
  }
}

#ifdef KVLM_KERNEL_ISA
}  // namespace KVLM_KERNEL_ISA
#endif
}  // namespace kvlm::cpu
