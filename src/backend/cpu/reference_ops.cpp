#include "backend/cpu/reference_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/assert.h"

namespace kvlm {

int64_t rope_rot_dim(const RopeParams& p, int64_t head_dim) {
  const int64_t rot_dim = p.rot_dim > 0 ? p.rot_dim : head_dim;
  KVLM_ASSERT(rot_dim % 2 == 0 && rot_dim <= head_dim, "rope: rot_dim must be even and <= head_dim");
  return rot_dim;
}

void rope_angles(int32_t pos, const RopeParams& p, int64_t rot_dim, float* cos_out, float* sin_out) {
  const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(rot_dim));
  float theta = static_cast<float>(pos);
  for (int64_t i = 0; i < rot_dim / 2; ++i) {
    const float base_angle = p.freq_factors != nullptr ? theta / p.freq_factors[i] : theta;
    const float angle = p.freq_scale * base_angle;
    cos_out[i] = std::cos(angle) * p.attn_factor;
    sin_out[i] = std::sin(angle) * p.attn_factor;
    theta *= theta_scale;
  }
}

namespace ref {

float gelu_tanh(float x) {
  constexpr float kSqrt2OverPi = 0.79788456080286535588f;
  constexpr float kCoef = 0.044715f;
  return 0.5f * x * (1.f + std::tanh(kSqrt2OverPi * x * (1.f + kCoef * x * x)));
}

float silu(float x) { return x / (1.f + std::exp(-x)); }

void rms_norm(const float* x, const float* w, float* y, int64_t num_rows, int64_t n, float eps) {
  for (int64_t r = 0; r < num_rows; ++r, x += n, y += n) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
    const float scale = static_cast<float>(1.0 / std::sqrt(sum / static_cast<double>(n) + eps));
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * w[i];
  }
}

void layer_norm(const float* x, const float* w, const float* b, float* y, int64_t num_rows,
                int64_t n, float eps) {
  for (int64_t r = 0; r < num_rows; ++r, x += n, y += n) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += x[i];
    const double mean = sum / static_cast<double>(n);
    double var = 0.0;
    for (int64_t i = 0; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
    const double scale = 1.0 / std::sqrt(var / static_cast<double>(n) + eps);
    for (int64_t i = 0; i < n; ++i) {
      const double v = (x[i] - mean) * scale * w[i] + (b != nullptr ? b[i] : 0.f);
      y[i] = static_cast<float>(v);
    }
  }
}

void rope(float* x, const int32_t* positions, int64_t num_tokens, int64_t num_heads,
          int64_t head_dim, const RopeParams& p) {
  const int64_t rot_dim = rope_rot_dim(p, head_dim);
  const int64_t half = rot_dim / 2;
  std::vector<float> cs(static_cast<size_t>(half));
  std::vector<float> sn(static_cast<size_t>(half));
  for (int64_t t = 0; t < num_tokens; ++t) {
    rope_angles(positions[t], p, rot_dim, cs.data(), sn.data());
    for (int64_t h = 0; h < num_heads; ++h) {
      float* v = x + (t * num_heads + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        // kNormal rotates neighbours (2i, 2i+1); kNeox rotates i with i + half.
        const int64_t i0 = p.style == RopeStyle::kNormal ? 2 * i : i;
        const int64_t i1 = p.style == RopeStyle::kNormal ? 2 * i + 1 : i + half;
        const float a = v[i0];
        const float b = v[i1];
        v[i0] = a * cs[i] - b * sn[i];
        v[i1] = a * sn[i] + b * cs[i];
      }
    }
  }
}

void softmax(float* x, int64_t num_rows, int64_t n) {
  for (int64_t r = 0; r < num_rows; ++r, x += n) {
    float max = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < n; ++i) max = std::max(max, x[i]);
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      x[i] = std::exp(x[i] - max);
      sum += x[i];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t i = 0; i < n; ++i) x[i] *= inv;
  }
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = silu(gate[i]) * up[i];
}

void geglu(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gelu_tanh(gate[i]) * up[i];
}

void gelu(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = gelu_tanh(x[i]);
}

void soft_cap(float* x, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

void add_inplace(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void add_bias(float* y, const float* b, int64_t num_rows, int64_t n) {
  for (int64_t r = 0; r < num_rows; ++r)
    for (int64_t i = 0; i < n; ++i) y[r * n + i] += b[i];
}

void scale_inplace(float* x, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

float dot_f32(const float* a, const float* b, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(a[i]) * b[i];
  return static_cast<float>(sum);
}

void axpy_f32(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

}  // namespace ref
}  // namespace kvlm
