// matmul_reference(): the oracle for matmul(). One token and one row at a
// time, activations quantized with the public quantize_row(), integer block
// dot products, and every floating-point sum in double so the reference is
// more accurate than any fast path it checks.
#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/fp16.h"
#include "backend/quant.h"
#include "backend/quant_impl.h"
#include "common/assert.h"

namespace kvlm {
namespace {

double dot_float_row(const float* w, const float* x, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(w[i]) * static_cast<double>(x[i]);
  return sum;
}

// Q8_0 / Q4_0 weights against Q8_0 activations.
double dot_q8_0(const BlockQ8_0* w, const BlockQ8_0* x, int64_t num_blocks) {
  double sum = 0.0;
  for (int64_t b = 0; b < num_blocks; ++b) {
    int sumi = 0;
    for (int j = 0; j < 32; ++j) sumi += w[b].qs[j] * x[b].qs[j];
    sum += static_cast<double>(sumi) * fp16_to_f32(w[b].d) * fp16_to_f32(x[b].d);
  }
  return sum;
}

double dot_q4_0(const BlockQ4_0* w, const BlockQ8_0* x, int64_t num_blocks) {
  double sum = 0.0;
  for (int64_t b = 0; b < num_blocks; ++b) {
    int sumi = 0;
    for (int j = 0; j < 16; ++j) {
      sumi += ((w[b].qs[j] & 0xF) - 8) * x[b].qs[j];
      sumi += ((w[b].qs[j] >> 4) - 8) * x[b].qs[j + 16];
    }
    sum += static_cast<double>(sumi) * fp16_to_f32(w[b].d) * fp16_to_f32(x[b].d);
  }
  return sum;
}

// Q4_K against Q8_K: value = d * sc_j * q - dmin * m_j for the 8 groups of 32.
double dot_q4_k(const BlockQ4_K* w, const BlockQ8_K* x, int64_t num_blocks) {
  double sum = 0.0;
  for (int64_t b = 0; b < num_blocks; ++b) {
    uint8_t sc[8];
    uint8_t mn[8];
    detail::unpack_q4_k_scales(w[b].scales, sc, mn);
    int64_t sumi = 0;  // sum_j sc_j * (q_j . x_j)
    int64_t summ = 0;  // sum_j m_j * sum(x_j)
    for (int j = 0; j < 8; ++j) {
      const uint8_t* q = w[b].qs + 32 * (j / 2);
      const int shift = 4 * (j % 2);
      int dot = 0;
      int xsum = 0;
      for (int l = 0; l < 32; ++l) {
        dot += ((q[l] >> shift) & 0xF) * x[b].qs[32 * j + l];
        xsum += x[b].qs[32 * j + l];
      }
      sumi += sc[j] * dot;
      summ += mn[j] * xsum;
    }
    const double dx = x[b].d;
    sum += fp16_to_f32(w[b].d) * dx * static_cast<double>(sumi) -
           fp16_to_f32(w[b].dmin) * dx * static_cast<double>(summ);
  }
  return sum;
}

// Q6_K against Q8_K: value = d * sc_g * (q - 32) for the 16 groups of 16.
double dot_q6_k(const BlockQ6_K* w, const BlockQ8_K* x, int64_t num_blocks) {
  double sum = 0.0;
  for (int64_t b = 0; b < num_blocks; ++b) {
    int q[256];
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = w[b].ql + 64 * h;
      const uint8_t* qh = w[b].qh + 32 * h;
      for (int l = 0; l < 32; ++l) {
        q[128 * h + l] = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        q[128 * h + l + 32] = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        q[128 * h + l + 64] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        q[128 * h + l + 96] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      }
    }
    int64_t sumi = 0;
    for (int g = 0; g < 16; ++g) {
      int dot = 0;
      for (int l = 0; l < 16; ++l) dot += q[16 * g + l] * x[b].qs[16 * g + l];
      sumi += w[b].scales[g] * dot;
    }
    sum += fp16_to_f32(w[b].d) * static_cast<double>(x[b].d) * static_cast<double>(sumi);
  }
  return sum;
}

}  // namespace

void matmul_reference(const WeightMatrix& w, const float* x, int64_t num_tokens, float* y) {
  KVLM_ASSERT(w.cols % dtype_info(w.dtype).block_size == 0, "matmul_reference: bad cols");
  KVLM_ASSERT(w.dtype != DType::kQ8_K, "matmul_reference: Q8_K is not a weight type");
  const int64_t cols = w.cols;
  const size_t wrow_bytes = row_bytes(w.dtype, cols);
  const auto* wbase = static_cast<const uint8_t*>(w.data);

  // The activation format the weight type pairs with, as ggml pairs them.
  DType act_type = DType::kF32;
  if (w.dtype == DType::kQ8_0 || w.dtype == DType::kQ4_0) act_type = DType::kQ8_0;
  if (w.dtype == DType::kQ4_K || w.dtype == DType::kQ6_K) act_type = DType::kQ8_K;
  const size_t act_row_bytes = row_bytes(act_type, cols);
  std::vector<uint8_t> acts(act_row_bytes * static_cast<size_t>(num_tokens));  // [num_tokens, row]
  for (int64_t t = 0; t < num_tokens; ++t) {
    quantize_row(act_type, x + t * cols, acts.data() + static_cast<size_t>(t) * act_row_bytes, cols);
  }

  std::vector<float> wrow(static_cast<size_t>(cols));  // float weight types, widened
  for (int64_t r = 0; r < w.rows; ++r) {
    const uint8_t* wr = wbase + static_cast<size_t>(r) * wrow_bytes;
    if (act_type == DType::kF32) dequantize_row(w.dtype, wr, wrow.data(), cols);
    for (int64_t t = 0; t < num_tokens; ++t) {
      const uint8_t* xr = acts.data() + static_cast<size_t>(t) * act_row_bytes;
      double v = 0.0;
      switch (w.dtype) {
        case DType::kF32:
        case DType::kF16:
        case DType::kBF16:
          v = dot_float_row(wrow.data(), reinterpret_cast<const float*>(xr), cols);
          break;
        case DType::kQ8_0:
          v = dot_q8_0(reinterpret_cast<const BlockQ8_0*>(wr), reinterpret_cast<const BlockQ8_0*>(xr), cols / 32);
          break;
        case DType::kQ4_0:
          v = dot_q4_0(reinterpret_cast<const BlockQ4_0*>(wr), reinterpret_cast<const BlockQ8_0*>(xr), cols / 32);
          break;
        case DType::kQ4_K:
          v = dot_q4_k(reinterpret_cast<const BlockQ4_K*>(wr), reinterpret_cast<const BlockQ8_K*>(xr), cols / 256);
          break;
        case DType::kQ6_K:
          v = dot_q6_k(reinterpret_cast<const BlockQ6_K*>(wr), reinterpret_cast<const BlockQ8_K*>(xr), cols / 256);
          break;
        case DType::kQ8_K:
          break;
      }
      y[t * w.rows + r] = static_cast<float>(v);
    }
  }
}

}  // namespace kvlm
