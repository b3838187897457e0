// Half-precision conversions (IEEE fp16 and bfloat16), scalar and bulk.
#pragma once

#include <cstdint>
#include <cstddef>

namespace kvlm {

float fp16_to_f32(uint16_t h);
uint16_t f32_to_fp16(float f);   // round to nearest even
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);   // round to nearest even, NaN kept NaN

// Bulk conversions (F16C / AVX2 where available).
void fp16_to_f32_row(const uint16_t* src, float* dst, int64_t n);
void f32_to_fp16_row(const float* src, uint16_t* dst, int64_t n);
void bf16_to_f32_row(const uint16_t* src, float* dst, int64_t n);

}  // namespace kvlm
