// The ops a forward pass runs, behind one interface, so that model/ is
// written once for every backend: the families call these and never a
// kernel (model/ includes backend/*.h, never backend/cpu/*.h). The CPU's
// implementation is backend/cpu/cpu_backend.h; another backend derives from
// Backend and is handed to Model::load (ModelLoadOptions::backend).
//
// One virtual call per op: an op runs over a whole step's tokens (a layer's
// matmul, a norm over [T, dim]), so the call costs nothing beside it. An op
// allocates nothing per call beyond what its kernel does, and copies nothing.
//
// Buffers are f32, row-major, in host memory, the model's (ForwardScratch);
// shapes are written beside each op. Every op is batch-invariant: a row of
// the output depends only on the same row of the input (and, for attention,
// on its sequence's KV), bit for bit, whatever else is in the batch, so a
// sequence gets the same logits alone or batched (tests/unit/engine's
// runner_batch_test.cpp compares them bit for bit).
#pragma once

#include <cstdint>
#include <span>

#include "backend/kv_layout.h"
#include "backend/rope_params.h"
#include "backend/weight_matrix.h"

namespace kvlm {

class Backend {
 public:
  virtual ~Backend() = default;

  // --- Weights ---------------------------------------------------------
  // Returns w ready for matmul: with the backend's own copy in `packed` when
  // it reads one (the CPU's SIMD paths pack rows into strips). Called once
  // per matrix at load time; may cost the matrix's size in memory.
  virtual WeightMatrix prepare_matrix(WeightMatrix w) const = 0;
  // One row of w (an embedding lookup) as f32, from w.data.  out: [w.cols]
  virtual void get_row(const WeightMatrix& w, int64_t row, float* out) const = 0;
  // y[t][o] = sum_i w[o][i] * x[t][i].  x: [num_tokens, w.cols];
  // y: [num_tokens, w.rows], overwritten. Any dtype the GGUF reader accepts.
  virtual void matmul(const WeightMatrix& w, const float* x, int64_t num_tokens, float* y) const = 0;
  // matmul of one input by several matrices (a layer's q, k and v, or its
  // gate and up), each y what matmul gives; a backend may share work across them.
  virtual void matmul_many(std::span<const MatmulJob> jobs, const float* x, int64_t num_tokens) const = 0;
  // Independent matmuls, each its own matrix and input, each y what matmul
  // gives: a step's LoRA adapters (each adapter's rows shrunk by its A, then
  // expanded by its B; model/lora_apply.h), many small products that a
  // backend runs as one batch of work (Punica's grouped GEMM).
  virtual void matmul_grouped(std::span<const GroupedMatmulJob> jobs) const = 0;

  // --- Row-wise --------------------------------------------------------
  // y = x / sqrt(mean(x^2) + eps) * w per row; x and y may alias.  x, y: [num_rows, n]; w: [n]
  virtual void rms_norm(const float* x, const float* w, float* y, int64_t num_rows, int64_t n,
                        float eps) const = 0;
  // y = (x - mean) / sqrt(var + eps) * w + b per row; b may be nullptr; x and y may alias.
  virtual void layer_norm(const float* x, const float* w, const float* b, float* y, int64_t num_rows,
                          int64_t n, float eps) const = 0;
  // Rotates each head of each token in place by its position, as ggml's rope.
  // x: [num_tokens, num_heads, head_dim]; positions: [num_tokens].
  virtual void rope(float* x, const int32_t* positions, int64_t num_tokens, int64_t num_heads,
                    int64_t head_dim, const RopeParams& p) const = 0;
  // In-place numerically stable softmax of each row.  x: [num_rows, n]
  virtual void softmax(float* x, int64_t num_rows, int64_t n) const = 0;

  // --- Element-wise, all [n] -------------------------------------------
  // out = silu(gate) * up; out may alias gate.
  virtual void swiglu(const float* gate, const float* up, float* out, int64_t n) const = 0;
  // out = gelu_tanh(gate) * up (Gemma's GeGLU); out may alias gate.
  virtual void geglu(const float* gate, const float* up, float* out, int64_t n) const = 0;
  // x = gelu(x) in place, tanh approximation as in GPT-2 / ggml.
  virtual void gelu(float* x, int64_t n) const = 0;
  // x = cap * tanh(x / cap) in place (Gemma-2 soft-capping).
  virtual void soft_cap(float* x, int64_t n, float cap) const = 0;
  // y += x.
  virtual void add_inplace(float* y, const float* x, int64_t n) const = 0;
  // y[r] += b for each row (bias add).  y: [num_rows, n]; b: [n]
  virtual void add_bias(float* y, const float* b, int64_t num_rows, int64_t n) const = 0;
  // x *= s.
  virtual void scale_inplace(float* x, int64_t n, float s) const = 0;

  // --- Attention over the paged KV (backend/kv_layout.h) ---------------
  // Writes the K and V rows of num_tokens tokens into their slots.
  // k, v: [num_tokens, num_kv_heads, head_dim]; slots: [num_tokens] physical
  // slots (block_id * block_size + offset).
  virtual void kv_write(const KvLayout& layout, const KvLayer& layer, const float* k, const float* v,
                        const int64_t* slots, int64_t num_tokens) const = 0;
  // KV chunks' probe (kv/kv_chunks.h): out[t] = the squared distance between
  // the K and V rows of token t and those its slot holds now (as stored, so
  // read back through the KV type), summed over heads. Call before kv_write.
  virtual void kv_deviation(const KvLayout& layout, const KvLayer& layer, const float* k, const float* v,
                            const int64_t* slots, int64_t num_tokens, float* out) const = 0;
  // out[t, h, :] = softmax(q[t, h, :] . K^T * scale) . V over each query's
  // visible slots (AttentionSeq), with the params' soft-cap and window.
  // q, out: [num_tokens_total, num_heads, head_dim].
  virtual void paged_attention(const KvLayout& layout, const KvLayer& layer, const float* q,
                               std::span<const AttentionSeq> seqs, const AttentionParams& params,
                               float* out) const = 0;
};

// The backend a model runs on when its loader names none: the CPU's today
// (defined in backend/cpu/cpu_backend.cpp). Stateless; lives as long as the
// program.
const Backend& default_backend();

}  // namespace kvlm
