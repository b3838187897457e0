// K-quant weight types (256-value super-blocks): Q4_K and Q6_K.
//
// The quantizers follow ggml's reference quantizers step by step
// (quantize_row_q4_K_ref with make_qkx2_quants, quantize_row_q6_K_ref with
// make_qx_quants), including the order of every float operation: the chosen
// scales depend on comparisons of rounded sums, so a tensor quantized here has
// the same bytes as one quantized by llama.cpp's tools.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/fp16.h"
#include "backend/quant_impl.h"

namespace kvlm::detail {
namespace {

// Below this a group is treated as all zeros (ggml's GROUP_MAX_EPS).
constexpr float kGroupMaxEps = 1e-15f;

// Symmetric quantization of n values to integers in [-nmax, nmax - 1], stored
// offset by nmax in L. Returns the scale. Starts from the scale that maps the
// signed max to -nmax, then tries 18 nearby scales and keeps the one with the
// least error weighted by x^2 (ggml's make_qx_quants with rmse_type 1).
float make_qx_quants(int n, int nmax, const float* x, int8_t* L) {
  float max = 0.f;
  float amax = 0.f;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    std::memset(L, 0, static_cast<size_t>(n));
    return 0.f;
  }
  auto clamp_level = [nmax](int l) { return std::max(-nmax, std::min(nmax - 1, l)); };

  float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0.f;
  float suml2 = 0.f;
  for (int i = 0; i < n; ++i) {
    const int l = clamp_level(nearest_int(iscale * x[i]));
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    const float fl = static_cast<float>(l);
    sumlx += w * x[i] * fl;
    suml2 += w * fl * fl;
  }
  float scale = suml2 != 0.f ? sumlx / suml2 : 0.f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    sumlx = 0.f;
    suml2 = 0.f;
    for (int i = 0; i < n; ++i) {
      const int l = clamp_level(nearest_int(iscale * x[i]));
      const float w = x[i] * x[i];
      const float fl = static_cast<float>(l);
      sumlx += w * x[i] * fl;
      suml2 += w * fl * fl;
    }
    if (suml2 > 0.f && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        L[i] = static_cast<int8_t>(nmax + clamp_level(nearest_int(iscale * x[i])));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Asymmetric quantization x ~ scale * L - the_min, L in [0, nmax], with a
// weighted least-squares fit of scale and min over nstep+1 candidate level
// assignments (ggml's make_qkx2_quants with use_mad = false).
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                       float* the_min, uint8_t* Laux, float rmin, float rdelta, int nstep) {
  float min = x[0];
  float max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::memset(L, 0, static_cast<size_t>(n));
    *the_min = -min;
    return 0.f;
  }
  const float fnmax = static_cast<float>(nmax);
  auto clamp_level = [nmax](int l) { return std::max(0, std::min(nmax, l)); };

  float iscale = fnmax / (max - min);
  float scale = 1.f / iscale;
  float best_error = 0.f;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(clamp_level(nearest_int(iscale * (x[i] - min))));
    float diff = scale * static_cast<float>(L[i]) + min - x[i];
    diff = diff * diff;
    best_error += weights[i] * diff;
  }
  if (nstep < 1) {
    *the_min = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * static_cast<float>(is) + fnmax) / (max - min);
    float sum_l = 0.f;
    float sum_l2 = 0.f;
    float sum_xl = 0.f;
    for (int i = 0; i < n; ++i) {
      const int l = clamp_level(nearest_int(iscale * (x[i] - min)));
      Laux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      const float fl = static_cast<float>(l);
      sum_l += w * fl;
      sum_l2 += w * fl * fl;
      sum_xl += w * fl * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0.f;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * static_cast<float>(Laux[i]) + this_min - x[i];
        diff = diff * diff;
        cur_error += weights[i] * diff;
      }
      if (cur_error < best_error) {
        std::memcpy(L, Laux, static_cast<size_t>(n));
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

}  // namespace

// ---- Q4_K: 8 sub-blocks of 32, value = d * scale_j * q - dmin * min_j, q in [0, 15].

void quantize_row_q4_k(const float* x, BlockQ4_K* y, int64_t n) {
  const int64_t num_blocks = n / 256;
  uint8_t L[256];
  uint8_t Laux[32];
  float weights[32];
  float mins[8];
  float scales[8];
  for (int64_t b = 0; b < num_blocks; ++b, x += 256) {
    BlockQ4_K& blk = y[b];
    float max_scale = 0.f;  // scales are positive once the min is taken out
    float max_min = 0.f;
    for (int j = 0; j < 8; ++j) {
      const float* xs = x + 32 * j;
      float sum_x2 = 0.f;
      for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
      const float av_x = std::sqrt(sum_x2 / 32.f);
      for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xs[l]);
      scales[j] = make_qkx2_quants(32, 15, xs, weights, L + 32 * j, &mins[j], Laux, -1.f, 0.1f, 20);
      max_scale = std::max(max_scale, scales[j]);
      max_min = std::max(max_min, mins[j]);
    }

    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < 8; ++j) {
      const uint8_t ls = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_scale * scales[j])));
      const uint8_t lm = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_min * mins[j])));
      if (j < 4) {
        blk.scales[j] = ls;
        blk.scales[j + 4] = lm;
      } else {
        blk.scales[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
        blk.scales[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
        blk.scales[j] |= static_cast<uint8_t>((lm >> 4) << 6);
      }
    }
    blk.d = f32_to_fp16(max_scale / 63.f);
    blk.dmin = f32_to_fp16(max_min / 63.f);

    // Requantize against the scales as they will be decoded (6-bit, fp16).
    uint8_t sc[8];
    uint8_t mn[8];
    unpack_q4_k_scales(blk.scales, sc, mn);
    const float d_all = fp16_to_f32(blk.d);
    const float dmin_all = fp16_to_f32(blk.dmin);
    for (int j = 0; j < 8; ++j) {
      const float d = d_all * static_cast<float>(sc[j]);
      if (d == 0.f) continue;  // keeps the levels chosen above, as ggml does
      const float dm = dmin_all * static_cast<float>(mn[j]);
      for (int i = 0; i < 32; ++i) {
        const int l = nearest_int((x[32 * j + i] + dm) / d);
        L[32 * j + i] = static_cast<uint8_t>(std::max(0, std::min(15, l)));
      }
    }

    // 64 values per 32 bytes: the first 32 in the low nibbles, the next 32 in the high.
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        blk.qs[32 * c + l] = static_cast<uint8_t>(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
      }
    }
  }
}

void dequantize_row_q4_k(const BlockQ4_K* x, float* y, int64_t n) {
  const int64_t num_blocks = n / 256;
  for (int64_t b = 0; b < num_blocks; ++b) {
    const float d = fp16_to_f32(x[b].d);
    const float dmin = fp16_to_f32(x[b].dmin);
    uint8_t sc[8];
    uint8_t mn[8];
    unpack_q4_k_scales(x[b].scales, sc, mn);
    const uint8_t* q = x[b].qs;
    for (int c = 0; c < 4; ++c, q += 32) {
      const float d1 = d * static_cast<float>(sc[2 * c]);
      const float m1 = dmin * static_cast<float>(mn[2 * c]);
      const float d2 = d * static_cast<float>(sc[2 * c + 1]);
      const float m2 = dmin * static_cast<float>(mn[2 * c + 1]);
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

// ---- Q6_K: 16 sub-blocks of 16, value = d * scale_j * (q - 32), q in [0, 63].

void quantize_row_q6_k(const float* x, BlockQ6_K* y, int64_t n) {
  const int64_t num_blocks = n / 256;
  int8_t L[256];
  float scales[16];
  for (int64_t b = 0; b < num_blocks; ++b, x += 256) {
    BlockQ6_K& blk = y[b];
    float max_scale = 0.f;
    float max_abs_scale = 0.f;
    for (int g = 0; g < 16; ++g) {
      scales[g] = make_qx_quants(16, 32, x + 16 * g, L + 16 * g);
      const float abs_scale = std::fabs(scales[g]);
      if (abs_scale > max_abs_scale) {
        max_abs_scale = abs_scale;
        max_scale = scales[g];
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&blk, 0, sizeof(blk));
      continue;
    }

    const float iscale = -128.f / max_scale;
    blk.d = f32_to_fp16(1.f / iscale);
    for (int g = 0; g < 16; ++g) {
      blk.scales[g] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[g])));
    }
    const float d_all = fp16_to_f32(blk.d);
    for (int g = 0; g < 16; ++g) {
      const float d = d_all * static_cast<float>(blk.scales[g]);
      if (d == 0.f) continue;  // keeps the levels from make_qx_quants, as ggml does
      for (int i = 0; i < 16; ++i) {
        const int l = nearest_int(x[16 * g + i] / d);
        L[16 * g + i] = static_cast<int8_t>(std::max(-32, std::min(31, l)) + 32);
      }
    }

    // Each half of 128 values: ql holds low nibbles (values l and l+64 share
    // byte l, values l+32 and l+96 share byte l+32), qh the 2 high bits of
    // values l, l+32, l+64, l+96 in byte l.
    uint8_t* ql = blk.ql;
    uint8_t* qh = blk.qh;
    for (int h = 0; h < 256; h += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const auto q1 = static_cast<uint8_t>(L[h + l]);
        const auto q2 = static_cast<uint8_t>(L[h + l + 32]);
        const auto q3 = static_cast<uint8_t>(L[h + l + 64]);
        const auto q4 = static_cast<uint8_t>(L[h + l + 96]);
        ql[l] = static_cast<uint8_t>((q1 & 0xF) | ((q3 & 0xF) << 4));
        ql[l + 32] = static_cast<uint8_t>((q2 & 0xF) | ((q4 & 0xF) << 4));
        qh[l] = static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
      }
    }
  }
}

void dequantize_row_q6_k(const BlockQ6_K* x, float* y, int64_t n) {
  const int64_t num_blocks = n / 256;
  for (int64_t b = 0; b < num_blocks; ++b) {
    const float d = fp16_to_f32(x[b].d);
    const uint8_t* ql = x[b].ql;
    const uint8_t* qh = x[b].qh;
    const int8_t* sc = x[b].scales;
    for (int h = 0; h < 2; ++h, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int g = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * static_cast<float>(sc[g]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(sc[g + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(sc[g + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(sc[g + 6]) * static_cast<float>(q4);
      }
    }
  }
}

}  // namespace kvlm::detail
