// Element-wise and row-wise kernels of the forward pass. Every function has a
// SIMD path (AVX2/FMA when compiled in) and is tested against a scalar
// reference. Buffers are f32, row-major; `n` is the row length.
#pragma once

#include <cstdint>

#include "backend/rope_params.h"

namespace kvlm {

// y = x / sqrt(mean(x^2) + eps) * w, per row. x and y may alias.  x, y: [num_rows, n]; w: [n]
void rms_norm(const float* x, const float* w, float* y, int64_t num_rows, int64_t n, float eps);

// y = (x - mean) / sqrt(var + eps) * w + b, per row. b may be nullptr. x, y may alias.
void layer_norm(const float* x, const float* w, const float* b, float* y, int64_t num_rows,
                int64_t n, float eps);

// Rotates each head of each token in place by its position.
// x: [num_tokens, num_heads, head_dim]; positions: [num_tokens].
// theta_i = pos * freq_scale * freq_base^(-2i/rot_dim) / freq_factors[i];
// the pair is rotated by theta_i and scaled by attn_factor (as ggml's rope).
void rope(float* x, const int32_t* positions, int64_t num_tokens, int64_t num_heads,
          int64_t head_dim, const RopeParams& p);

// In-place numerically stable softmax of each row.  x: [num_rows, n]
void softmax(float* x, int64_t num_rows, int64_t n);

// out = silu(gate) * up, element-wise.  all [n]; out may alias gate.
void swiglu(const float* gate, const float* up, float* out, int64_t n);
// out = gelu_tanh(gate) * up (Gemma's GeGLU).
void geglu(const float* gate, const float* up, float* out, int64_t n);
// x = gelu(x) in place, tanh approximation as in GPT-2 / ggml.
void gelu(float* x, int64_t n);
// x = cap * tanh(x / cap) in place (Gemma-2 soft-capping).
void soft_cap(float* x, int64_t n, float cap);

// y += x.  [n]
void add_inplace(float* y, const float* x, int64_t n);
// y[r] += b for each row (bias add).  y: [num_rows, n]; b: [n]
void add_bias(float* y, const float* b, int64_t num_rows, int64_t n);
// x *= s.  [n]
void scale_inplace(float* x, int64_t n, float s);
// Dot product and y += a * x, for attention.
float dot_f32(const float* a, const float* b, int64_t n);
void axpy_f32(float a, const float* x, float* y, int64_t n);

}  // namespace kvlm
