// Plain scalar versions of every kernel in ops.h: the oracle the SIMD paths
// are tested against. Written for clarity, with sums in double; same
// contracts and shapes as ops.h.
#pragma once

#include <cstdint>

#include "backend/cpu/ops.h"

namespace kvlm::ref {

void rms_norm(const float* x, const float* w, float* y, int64_t num_rows, int64_t n, float eps);
void layer_norm(const float* x, const float* w, const float* b, float* y, int64_t num_rows,
                int64_t n, float eps);
void rope(float* x, const int32_t* positions, int64_t num_tokens, int64_t num_heads,
          int64_t head_dim, const RopeParams& p);
void softmax(float* x, int64_t num_rows, int64_t n);
void swiglu(const float* gate, const float* up, float* out, int64_t n);
void geglu(const float* gate, const float* up, float* out, int64_t n);
void gelu(float* x, int64_t n);
void soft_cap(float* x, int64_t n, float cap);
void add_inplace(float* y, const float* x, int64_t n);
void add_bias(float* y, const float* b, int64_t num_rows, int64_t n);
void scale_inplace(float* x, int64_t n, float s);
float dot_f32(const float* a, const float* b, int64_t n);
void axpy_f32(float a, const float* x, float* y, int64_t n);

// Scalar activation functions shared by the reference and SIMD tails.
float gelu_tanh(float x);  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
float silu(float x);       // x / (1 + e^-x)

}  // namespace kvlm::ref

namespace kvlm {

// cos/sin of the rot_dim/2 rotation angles of one position, computed the way
// ggml does (theta_i = freq_scale * pos * base^(-2i/rot_dim), with the power
// accumulated by repeated f32 multiplication, divided by p.freq_factors[i]
// when set) so positions match llama.cpp; cos and sin are scaled by
// p.attn_factor. cos_out, sin_out: [rot_dim / 2]. Used by both rope() and ref::rope().
void rope_angles(int32_t pos, const RopeParams& p, int64_t rot_dim, float* cos_out, float* sin_out);

// rot_dim as used: p.rot_dim, or head_dim when p.rot_dim is 0.
int64_t rope_rot_dim(const RopeParams& p, int64_t head_dim);

}  // namespace kvlm
