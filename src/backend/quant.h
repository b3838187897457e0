// GGUF block layouts and row-wise (de)quantization for every DType.
// Layouts follow ggml exactly (ggml-common.h); a row of n elements is n /
// block_size blocks back to back.
#pragma once

#include <cstdint>

#include "backend/dtype.h"

namespace kvlm {

struct BlockQ8_0 {
  uint16_t d;      // fp16 scale
  int8_t qs[32];   // value = d * qs[i]
};
static_assert(sizeof(BlockQ8_0) == 34);

struct BlockQ4_0 {
  uint16_t d;       // fp16 scale
  uint8_t qs[16];   // value[i] = d * ((qs[i] & 15) - 8), value[i + 16] = d * ((qs[i] >> 4) - 8)
};
static_assert(sizeof(BlockQ4_0) == 18);

struct BlockQ4_K {
  uint16_t d;           // fp16 super-block scale for the 6-bit scales
  uint16_t dmin;        // fp16 super-block scale for the 6-bit mins
  uint8_t scales[12];   // 8 sub-blocks of 32: 6-bit scale and 6-bit min each, packed
  uint8_t qs[128];      // 4-bit quants
};
static_assert(sizeof(BlockQ4_K) == 144);

struct BlockQ6_K {
  uint8_t ql[128];      // low 4 bits
  uint8_t qh[64];       // high 2 bits
  int8_t scales[16];    // 16 sub-blocks of 16
  uint16_t d;           // fp16 super-block scale
};
static_assert(sizeof(BlockQ6_K) == 210);

struct BlockQ8_K {
  float d;              // scale
  int8_t qs[256];       // quants
  int16_t bsums[16];    // sum of qs in each group of 16
};
static_assert(sizeof(BlockQ8_K) == 292);

// Dequantizes (or converts) `n` elements of a row of type `t` into f32.
// Precondition: n % block_size(t) == 0.
void dequantize_row(DType t, const void* src, float* dst, int64_t n);

// Quantizes (or converts) `n` f32 values into a row of type `t`, with the same
// rounding as ggml's reference quantizers (quantize_row_*_ref), so a tensor
// quantized here matches one quantized by llama.cpp's tools.
// Precondition: n % block_size(t) == 0.
void quantize_row(DType t, const float* src, void* dst, int64_t n);

}  // namespace kvlm
