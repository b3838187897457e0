#include "backend/fp16.h"

#include <cstring>

#if defined(__F16C__) && defined(__AVX__)
#include <immintrin.h>
#endif

namespace kvlm {
namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

}  // namespace

// Bit-level conversions, exact for every input (normals, subnormals, inf, NaN),
// so results never depend on whether the CPU has F16C.
float fp16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  if (exp == 0x1F) return float_of(sign | 0x7F800000u | (mant << 13));  // inf / NaN
  if (exp != 0) return float_of(sign | ((exp + 112) << 23) | (mant << 13));
  if (mant == 0) return float_of(sign);  // signed zero
  // Subnormal: value = mant * 2^-24; normalise the mantissa.
  int e = -1;
  do {
    mant <<= 1;
    ++e;
  } while ((mant & 0x400u) == 0);
  mant &= 0x3FFu;
  return float_of(sign | static_cast<uint32_t>(112 - e) << 23 | (mant << 13));
}

uint16_t f32_to_fp16(float f) {
  const uint32_t u = bits_of(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) {  // inf or NaN (keep NaN quiet and non-zero)
    return static_cast<uint16_t>(sign | 0x7C00u | (abs > 0x7F800000u ? 0x200u | ((abs >> 13) & 0x3FFu) : 0));
  }
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds to >= 65520: inf
  if (abs >= 0x38800000u) {  // normal half range (>= 2^-14)
    // Rebias the exponent (127 -> 15) and round the 13 dropped bits to nearest even;
    // a carry out of the mantissa correctly bumps the exponent.
    const uint32_t rebased = abs - (112u << 23);
    const uint32_t round = 0xFFFu + ((rebased >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((rebased + round) >> 13));
  }
  if (abs < 0x33000000u) return sign;  // below half of the smallest subnormal (2^-25): zero
  // Subnormal half: value = m * 2^-24 with m = round(abs_value * 2^24).
  const uint32_t exp = abs >> 23;
  const uint32_t mant = (abs & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126 - exp;  // 14..24 bits to drop from the 24-bit mantissa
  const uint32_t half_ulp = 1u << (shift - 1);
  const uint32_t rest = mant & ((1u << shift) - 1);
  uint32_t m = mant >> shift;
  if (rest > half_ulp || (rest == half_ulp && (m & 1u))) ++m;
  return static_cast<uint16_t>(sign | m);
}

float bf16_to_f32(uint16_t h) { return float_of(static_cast<uint32_t>(h) << 16); }

uint16_t f32_to_bf16(float f) {
  const uint32_t u = bits_of(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 64u);  // quiet NaN
  return static_cast<uint16_t>((u + (0x7FFFu + ((u >> 16) & 1u))) >> 16);
}

uint16_t f32_to_bf16_flush(float f) {
  const uint32_t u = bits_of(f);
  if ((u & 0x7F800000u) == 0) return static_cast<uint16_t>((u >> 16) & 0x8000u);
  return f32_to_bf16(f);
}

void fp16_to_f32_row(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__) && defined(__AVX__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) dst[i] = fp16_to_f32(src[i]);
}

void f32_to_fp16_row(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__) && defined(__AVX__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
#endif
  for (; i < n; ++i) dst[i] = f32_to_fp16(src[i]);
}

void bf16_to_f32_row(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
#if defined(__AVX2__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(w));
  }
#endif
  for (; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}

}  // namespace kvlm
