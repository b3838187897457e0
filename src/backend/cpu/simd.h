// Small AVX2/FMA helpers shared by the CPU kernels. Everything here is
// inline and guarded by KVLM_AVX2; code that includes this header provides
// its own scalar path, which is what the plain compile (the scalar CpuPath,
// cpu_path.h) runs: KVLM_AVX2 is set only in the per-ISA translation units
// (KVLM_KERNEL_ISA), even when the whole build has -march=native.
#pragma once

#include <cstdint>

#include "backend/fp16.h"

#if defined(KVLM_KERNEL_ISA) && defined(__AVX2__) && defined(__FMA__)
#define KVLM_AVX2 1
#include <immintrin.h>
#else
#define KVLM_AVX2 0
#endif
#if defined(__F16C__)
#include <immintrin.h>  // _cvtsh_ss, which the scalar twins use too
#endif

// Each ISA translation unit (KVLM_KERNEL_ISA, matmul_impl.h) gets its own
// copy of these inline functions under its own mangled names.
#ifdef KVLM_KERNEL_ISA
#define KVLM_SIMD_NS KVLM_KERNEL_ISA
#else
#define KVLM_SIMD_NS base
#endif

namespace kvlm::simd {
inline namespace KVLM_SIMD_NS {

// fp16 -> f32 for one value, inlined into the inner loops (per-block scales).
inline float half_to_float(uint16_t h) {
#if defined(__F16C__)
  return _cvtsh_ss(h);
#else
  return fp16_to_f32(h);
#endif
}

#if KVLM_AVX2

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline __m256 abs_ps(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.f), v); }

// Sum of the products of 32 signed bytes: maddubs needs an unsigned first
// operand, so move w's sign onto x (|w| * sign(w) x). Neither side is -128 in
// our data, so the 16-bit pair sums cannot saturate.
inline __m256i dot_i8_pairs(__m256i abs_w, __m256i w, __m256i x) {
  const __m256i p16 = _mm256_maddubs_epi16(abs_w, _mm256_sign_epi8(x, w));
  return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

// 8 x 8 transpose of 32-bit lanes: afterwards r[j] lane i holds what r[i]
// lane j held. Packs 8 weight rows so that lane k of a vector is row k.
inline void transpose8_epi32(__m256i r[8]) {
  __m256i t[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);      // lanes 0,1 | 4,5 of rows i, i+1
    t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);  // lanes 2,3 | 6,7
  }
  __m256i u[8];
  for (int h = 0; h < 8; h += 4) {  // rows 0-3, then 4-7
    u[h] = _mm256_unpacklo_epi64(t[h], t[h + 2]);      // lane 0 | 4 of the four rows
    u[h + 1] = _mm256_unpackhi_epi64(t[h], t[h + 2]);  // lane 1 | 5
    u[h + 2] = _mm256_unpacklo_epi64(t[h + 1], t[h + 3]);  // lane 2 | 6
    u[h + 3] = _mm256_unpackhi_epi64(t[h + 1], t[h + 3]);  // lane 3 | 7
  }
  for (int j = 0; j < 4; ++j) {
    r[j] = _mm256_permute2x128_si256(u[j], u[j + 4], 0x20);
    r[j + 4] = _mm256_permute2x128_si256(u[j], u[j + 4], 0x31);
  }
}

// Asks for the cache lines of [p, p + bytes) ahead of use. The kernels stream
// packed weights from DRAM at decode; with the hardware prefetchers alone they
// reached about half the read bandwidth on the EPYC we measure on.
inline void prefetch(const void* p, size_t bytes) {
  for (size_t l = 0; l < bytes; l += 64) _mm_prefetch(static_cast<const char*>(p) + l, _MM_HINT_T0);
}

// The 4 bytes at p (any alignment) in every 32-bit lane.
inline __m256i broadcast4(const void* p) {
  int32_t v;
  __builtin_memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

#if (defined(__AVX512VNNI__) && defined(__AVX512VL__)) || defined(__AVXVNNI__)
#define KVLM_VNNI256 1
// acc + per 32-bit lane the sum of the 4 products of u's unsigned and s's
// signed bytes (vpdpbusd): AVX-512 VNNI's EVEX form, or AVX-VNNI's VEX one
// on CPUs without AVX-512. The same integers either way.
inline __m256i dpbusd(__m256i acc, __m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(acc, u, s);
#else
  return _mm256_dpbusd_avx_epi32(acc, u, s);
#endif
}
#else
#define KVLM_VNNI256 0
#endif

#if defined(__AVX512VNNI__)
// acc + vpdpbusd(u, the 4 signed bytes at s broadcast to every lane), the
// broadcast folded into the instruction ({1to16}). GCC does not fold
// _mm512_set1_epi32 of a load into vpdpbusd: it issues a separate broadcast
// per call and copies accumulators between registers around it, one or two
// extra uops per vpdpbusd in the tiles of several tokens. Inline asm, as the
// intrinsic has no memory form.
inline __m512i dpbusd_bcst(__m512i acc, __m512i u, const void* s) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(u), "m"(*static_cast<const int32_t*>(s)));
  return acc;
}
#endif

// e^x for f32 lanes: range reduction x = n ln2 + r, |r| <= ln2/2, and a
// degree-6 polynomial for e^r (max relative error ~2 ulp over [-87, 88]).
// Inputs below -87.3 give 0, above 88.7 give +inf. kNonPositive: the
// caller's inputs are at most 0 or NaN (softmax's x - max), for which the
// clamp at 88.7 and the +inf blend change nothing: they are left out (12%
// of e^x's time in a probe), the bits the same.
template <bool kNonPositive = false>
inline __m256 exp_ps(__m256 x) {
  const __m256 hi = _mm256_set1_ps(88.7f);
  const __m256 lo = _mm256_set1_ps(-87.3f);
  const __m256 too_low = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  const __m256 too_high = kNonPositive ? _mm256_setzero_ps() : _mm256_cmp_ps(x, hi, _CMP_GT_OQ);
  x = _mm256_max_ps(x, lo);  // (a NaN gives lo: max returns its second operand)
  if (!kNonPositive) x = _mm256_min_ps(x, hi);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // r = x - n ln2 with ln2 split in two so the product is exact enough.
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.f)));
  // Scale by 2^n in two steps so n = 128 (x near 88.7) does not overflow the
  // exponent. p * 2^(n/2) is exact (p is within [0.7, 1.5]), so the result
  // is p * 2^n rounded once: what AVX-512's vscalefps gives in one instruction
  // for nine, the same bits.
#if defined(__AVX512F__) && defined(__AVX512VL__)
  __m256 y = _mm256_scalef_ps(p, n);
#else
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i n1 = _mm256_srai_epi32(ni, 1);
  const __m256i n2 = _mm256_sub_epi32(ni, n1);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, _mm256_set1_epi32(127)), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, _mm256_set1_epi32(127)), 23));
  __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
#endif
  y = _mm256_andnot_ps(too_low, y);
  if (kNonPositive) return y;
  return _mm256_blendv_ps(y, _mm256_set1_ps(__builtin_huge_valf()), too_high);
}

// tanh(x) = sign(x) (1 - e^{-2|x|}) / (1 + e^{-2|x|}); below |x| = 0.4 the
// Taylor series to x^13 (relative error < 4e-9) avoids the cancellation in
// 1 - e^{-2|x|}, so small inputs keep full relative precision (soft-capping).
inline __m256 tanh_ps(__m256 x) {
  const __m256 sign = _mm256_and_ps(x, _mm256_set1_ps(-0.f));
  const __m256 ax = abs_ps(x);
  const __m256 e = exp_ps(_mm256_mul_ps(ax, _mm256_set1_ps(-2.f)));
  const __m256 one = _mm256_set1_ps(1.f);
  const __m256 big = _mm256_div_ps(_mm256_sub_ps(one, e), _mm256_add_ps(one, e));
  const __m256 x2 = _mm256_mul_ps(ax, ax);
  __m256 p = _mm256_set1_ps(21844.f / 6081075.f);
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-1382.f / 155925.f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(62.f / 2835.f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-17.f / 315.f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(2.f / 15.f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-1.f / 3.f));
  p = _mm256_fmadd_ps(p, x2, one);
  const __m256 small = _mm256_mul_ps(p, ax);
  const __m256 use_small = _mm256_cmp_ps(ax, _mm256_set1_ps(0.4f), _CMP_LT_OQ);
  return _mm256_or_ps(sign, _mm256_blendv_ps(big, small, use_small));
}

#if defined(__AVX512F__)
// exp_ps on 16 lanes: the same operations lane by lane, so the same bits.
// The zero-masking forms with every lane set: the plain ones trip GCC 12's
// -Wmaybe-uninitialized, as in attention.cpp's load16.
template <bool kNonPositive = false>
inline __m512 exp_ps16(__m512 x) {
  constexpr __mmask16 kAll = 0xFFFF;
  const __m512 hi = _mm512_set1_ps(88.7f);
  const __m512 lo = _mm512_set1_ps(-87.3f);
  const __mmask16 too_low = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
  const __mmask16 too_high = kNonPositive ? 0 : _mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ);
  x = _mm512_maskz_max_ps(kAll, x, lo);
  if (!kNonPositive) x = _mm512_maskz_min_ps(kAll, x, hi);
  const __m512 n = _mm512_maskz_roundscale_ps(kAll, _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.f)));
  // p * 2^n rounded once, as exp_ps's two exact-then-rounded steps give it.
  const __m512 y = _mm512_maskz_scalef_ps(static_cast<__mmask16>(~too_low), p, n);
  if (kNonPositive) return y;
  return _mm512_mask_blend_ps(too_high, y, _mm512_set1_ps(__builtin_huge_valf()));
}
#endif  // __AVX512F__
#endif  // KVLM_AVX2

}  // inline namespace KVLM_SIMD_NS
}  // namespace kvlm::simd
