// Half-precision conversions (IEEE fp16 and bfloat16), scalar and bulk.
#pragma once

#include <cstdint>
#include <cstddef>

namespace kvlm {

float fp16_to_f32(uint16_t h);
uint16_t f32_to_fp16(float f);   // round to nearest even
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);   // round to nearest even, NaN kept NaN
// As VCVTNEPS2BF16 rounds: f32_to_bf16, except that zeros and subnormals
// become a zero of the same sign. BF16 KV storage holds no subnormal, so the
// BF16 dot product, which reads subnormals as zero, sees what was stored.
uint16_t f32_to_bf16_flush(float f);

// Bulk conversions (F16C / AVX2 where available).
void fp16_to_f32_row(const uint16_t* src, float* dst, int64_t n);
void f32_to_fp16_row(const float* src, uint16_t* dst, int64_t n);
void bf16_to_f32_row(const uint16_t* src, float* dst, int64_t n);

}  // namespace kvlm
