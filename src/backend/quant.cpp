// Row (de)quantization dispatch, the float types, and the 32-element block
// types (Q8_0, Q4_0) plus Q8_K. The K-quant weight types live in quant_k.cpp.
#include "backend/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/fp16.h"
#include "backend/quant_impl.h"
#include "common/assert.h"

namespace kvlm {
namespace detail {

// quantize_row_q8_0_ref: d = amax / 127, q = round-half-away(x / d).
void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n) {
  const int64_t num_blocks = n / 32;
  for (int64_t b = 0; b < num_blocks; ++b, x += 32) {
    float amax = 0.f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    y[b].d = f32_to_fp16(d);
    for (int j = 0; j < 32; ++j) y[b].qs[j] = static_cast<int8_t>(std::round(x[j] * id));
  }
}

void dequantize_row_q8_0(const BlockQ8_0* x, float* y, int64_t n) {
  const int64_t num_blocks = n / 32;
  for (int64_t b = 0; b < num_blocks; ++b, y += 32) {
    const float d = fp16_to_f32(x[b].d);
    for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(x[b].qs[j]) * d;
  }
}

// quantize_row_q4_0_ref: the signed value of largest magnitude maps to -8, so
// d = max / -8 and q = min(15, trunc(x / d + 8.5)).
void quantize_row_q4_0(const float* x, BlockQ4_0* y, int64_t n) {
  const int64_t num_blocks = n / 32;
  for (int64_t b = 0; b < num_blocks; ++b, x += 32) {
    float amax = 0.f;
    float max = 0.f;
    for (int j = 0; j < 32; ++j) {
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    y[b].d = f32_to_fp16(d);
    for (int j = 0; j < 16; ++j) {
      // x * id lies in [-8, 8], so the argument of the truncation is positive.
      const int q0 = std::min(15, static_cast<int>(x[j] * id + 8.5f));
      const int q1 = std::min(15, static_cast<int>(x[j + 16] * id + 8.5f));
      y[b].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void dequantize_row_q4_0(const BlockQ4_0* x, float* y, int64_t n) {
  const int64_t num_blocks = n / 32;
  for (int64_t b = 0; b < num_blocks; ++b, y += 32) {
    const float d = fp16_to_f32(x[b].d);
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>((x[b].qs[j] & 0xF) - 8) * d;
      y[j + 16] = static_cast<float>((x[b].qs[j] >> 4) - 8) * d;
    }
  }
}

// quantize_row_q8_K_ref: the signed max maps to -127 (so q never reaches -128),
// d = 1 / iscale kept in f32, plus the sum of each group of 16 quants.
void quantize_row_q8_k(const float* x, BlockQ8_K* y, int64_t n) {
  const int64_t num_blocks = n / 256;
  for (int64_t b = 0; b < num_blocks; ++b, x += 256) {
    float amax = 0.f;
    float max = 0.f;
    for (int j = 0; j < 256; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    if (amax == 0.f) {
      std::memset(&y[b], 0, sizeof(BlockQ8_K));
      continue;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < 256; ++j) {
      y[b].qs[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * x[j])));
    }
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += y[b].qs[g * 16 + j];
      y[b].bsums[g] = static_cast<int16_t>(sum);
    }
    y[b].d = 1.f / iscale;
  }
}

void dequantize_row_q8_k(const BlockQ8_K* x, float* y, int64_t n) {
  const int64_t num_blocks = n / 256;
  for (int64_t b = 0; b < num_blocks; ++b, y += 256) {
    for (int j = 0; j < 256; ++j) y[j] = x[b].d * static_cast<float>(x[b].qs[j]);
  }
}

}  // namespace detail

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  KVLM_ASSERT(n % dtype_info(t).block_size == 0, "dequantize_row: n is not a whole number of blocks");
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kF16:
      fp16_to_f32_row(static_cast<const uint16_t*>(src), dst, n);
      return;
    case DType::kBF16:
      bf16_to_f32_row(static_cast<const uint16_t*>(src), dst, n);
      return;
    case DType::kQ8_0:
      detail::dequantize_row_q8_0(static_cast<const BlockQ8_0*>(src), dst, n);
      return;
    case DType::kQ4_0:
      detail::dequantize_row_q4_0(static_cast<const BlockQ4_0*>(src), dst, n);
      return;
    case DType::kQ4_K:
      detail::dequantize_row_q4_k(static_cast<const BlockQ4_K*>(src), dst, n);
      return;
    case DType::kQ6_K:
      detail::dequantize_row_q6_k(static_cast<const BlockQ6_K*>(src), dst, n);
      return;
    case DType::kQ8_K:
      detail::dequantize_row_q8_k(static_cast<const BlockQ8_K*>(src), dst, n);
      return;
  }
  KVLM_ASSERT(false, "dequantize_row: unknown dtype");
}

void quantize_row(DType t, const float* src, void* dst, int64_t n) {
  KVLM_ASSERT(n % dtype_info(t).block_size == 0, "quantize_row: n is not a whole number of blocks");
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kF16:
      f32_to_fp16_row(src, static_cast<uint16_t*>(dst), n);
      return;
    case DType::kBF16: {
      auto* out = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16(src[i]);
      return;
    }
    case DType::kQ8_0:
      detail::quantize_row_q8_0(src, static_cast<BlockQ8_0*>(dst), n);
      return;
    case DType::kQ4_0:
      detail::quantize_row_q4_0(src, static_cast<BlockQ4_0*>(dst), n);
      return;
    case DType::kQ4_K:
      detail::quantize_row_q4_k(src, static_cast<BlockQ4_K*>(dst), n);
      return;
    case DType::kQ6_K:
      detail::quantize_row_q6_k(src, static_cast<BlockQ6_K*>(dst), n);
      return;
    case DType::kQ8_K:
      detail::quantize_row_q8_k(src, static_cast<BlockQ8_K*>(dst), n);
      return;
  }
  KVLM_ASSERT(false, "quantize_row: unknown dtype");
}

}  // namespace kvlm
