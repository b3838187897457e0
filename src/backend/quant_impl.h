// Per-type row (de)quantizers behind quant.h's dispatch, and the rounding
// helper they share. Internal to backend/: the kernels use them directly.
#pragma once

#include <cstdint>
#include <cstring>

#include "backend/quant.h"

namespace kvlm::detail {

// Round to nearest, ties to even, for |x| <= 2^22: adding 1.5 * 2^23 pushes the
// fraction out of the mantissa. Bit-for-bit the rounding of ggml's nearest_int,
// which every K-quant decision depends on.
inline int nearest_int(float x) {
  float v = x + 12582912.f;
  int32_t i;
  std::memcpy(&i, &v, sizeof(i));
  return (i & 0x007FFFFF) - 0x00400000;
}

// n is a multiple of the type's block size in every function below.
void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n);
void dequantize_row_q8_0(const BlockQ8_0* x, float* y, int64_t n);
void quantize_row_q4_0(const float* x, BlockQ4_0* y, int64_t n);
void dequantize_row_q4_0(const BlockQ4_0* x, float* y, int64_t n);
void quantize_row_q8_k(const float* x, BlockQ8_K* y, int64_t n);
void dequantize_row_q8_k(const BlockQ8_K* x, float* y, int64_t n);
void quantize_row_q4_k(const float* x, BlockQ4_K* y, int64_t n);
void dequantize_row_q4_k(const BlockQ4_K* x, float* y, int64_t n);
void quantize_row_q6_k(const float* x, BlockQ6_K* y, int64_t n);
void dequantize_row_q6_k(const BlockQ6_K* x, float* y, int64_t n);

// Q4_K packs eight 6-bit scales and eight 6-bit mins into 12 bytes:
// sub-blocks 0-3 use the low 6 bits of bytes 0-3 (scale) and 4-7 (min);
// sub-blocks 4-7 use the nibbles of bytes 8-11 plus the top 2 bits of bytes 0-7.
inline void unpack_q4_k_scales(const uint8_t* packed, uint8_t* scales, uint8_t* mins) {
  for (int j = 0; j < 4; ++j) {
    scales[j] = packed[j] & 63;
    mins[j] = packed[j + 4] & 63;
  }
  for (int j = 4; j < 8; ++j) {
    scales[j] = static_cast<uint8_t>((packed[j + 4] & 0xF) | ((packed[j - 4] >> 6) << 4));
    mins[j] = static_cast<uint8_t>((packed[j + 4] >> 4) | ((packed[j] >> 6) << 4));
  }
}

}  // namespace kvlm::detail
