// Llama-family forward pass (llama, mistral, qwen2), batched over the T tokens
// of a step. Straight-line, in the spirit of llama2.c: the shape of every
// buffer is written beside it.
#include <algorithm>
#include <cmath>

#include "backend/cpu/attention.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"
#include "common/assert.h"
#include "model/model.h"
#include "model/weights.h"

namespace kvlm {
namespace {

struct LlamaLayer {
  std::vector<float> attn_norm;          // [dim]
  WeightMatrix wq, wk, wv, wo;           // [q_dim, dim], [kv_dim, dim] x2, [dim, q_dim]
  std::vector<float> bq, bk, bv;         // [q_dim], [kv_dim] x2; empty unless Qwen2-style biases
  std::vector<float> ffn_norm;           // [dim]
  WeightMatrix w_gate, w_up, w_down;     // [ffn, dim] x2, [dim, ffn]
};

class LlamaModel final : public Model {
 public:
  LlamaModel(std::unique_ptr<GgufFile> gguf, ModelConfig config)
      : Model(std::move(gguf), std::move(config)) {
    WeightLoader w(*gguf_);
    ModelConfig& c = config_;
    token_embd_ = w.token_embedding(c);
    output_norm_ = w.vector("output_norm.weight", c.dim);
    // Tied embeddings: no output.weight, the embedding matrix is the head.
    output_ = w.output_head(token_embd_, c.vocab_size, c.dim);
    for (int32_t l = 0; l < c.num_layers; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      LlamaLayer L;
      L.attn_norm = w.vector(p + "attn_norm.weight", c.dim);
      L.wq = w.matrix(p + "attn_q.weight", c.q_dim(), c.dim);
      L.wk = w.matrix(p + "attn_k.weight", c.kv_dim(), c.dim);
      L.wv = w.matrix(p + "attn_v.weight", c.kv_dim(), c.dim);
      L.wo = w.matrix(p + "attn_output.weight", c.dim, c.q_dim());
      L.bq = w.optional_vector(p + "attn_q.bias", c.q_dim());
      L.bk = w.optional_vector(p + "attn_k.bias", c.kv_dim());
      L.bv = w.optional_vector(p + "attn_v.bias", c.kv_dim());
      L.ffn_norm = w.vector(p + "ffn_norm.weight", c.dim);
      L.w_gate = w.matrix(p + "ffn_gate.weight", c.ffn_dim, c.dim);
      L.w_up = w.matrix(p + "ffn_up.weight", c.ffn_dim, c.dim);
      L.w_down = w.matrix(p + "ffn_down.weight", c.dim, c.ffn_dim);
      layers_.push_back(std::move(L));
    }
  }

  void forward(const ForwardBatch& batch, const KvCacheView& kv, ForwardScratch& s,
               float* logits) const override {
    const ModelConfig& c = config_;
    const int64_t T = static_cast<int64_t>(batch.tokens.size());
    KVLM_ASSERT(batch.positions.size() == batch.tokens.size(), "one position per token");
    s.x.resize(T * c.dim);          // [T, dim] residual stream
    s.xn.resize(T * c.dim);         // [T, dim] normed input of a sub-layer
    s.q.resize(T * c.q_dim());      // [T, heads, head_dim]
    s.k.resize(T * c.kv_dim());     // [T, kv_heads, head_dim]
    s.v.resize(T * c.kv_dim());     // [T, kv_heads, head_dim]
    s.attn.resize(T * c.q_dim());   // [T, heads, head_dim] attention output
    s.h1.resize(T * c.ffn_dim);     // [T, ffn] gate, then silu(gate) * up
    s.h2.resize(T * std::max(c.ffn_dim, c.dim));  // [T, ffn] up; [T, dim] sub-layer output

    for (int64_t t = 0; t < T; ++t) get_row(token_embd_, batch.tokens[t], &s.x[t * c.dim]);

    AttentionParams ap;
    ap.num_heads = c.num_heads;
    ap.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    for (int32_t l = 0; l < c.num_layers; ++l) {
      const LlamaLayer& L = layers_[l];
      const KvGroupBatch& group = batch.groups[kv.layer_group[l]];
      // Attention block.
      rms_norm(s.x.data(), L.attn_norm.data(), s.xn.data(), T, c.dim, c.norm_eps);
      const MatmulJob qkv[] = {{&L.wq, s.q.data()}, {&L.wk, s.k.data()}, {&L.wv, s.v.data()}};
      matmul_many(qkv, s.xn.data(), T);
      if (!L.bq.empty()) add_bias(s.q.data(), L.bq.data(), T, c.q_dim());
      if (!L.bk.empty()) add_bias(s.k.data(), L.bk.data(), T, c.kv_dim());
      if (!L.bv.empty()) add_bias(s.v.data(), L.bv.data(), T, c.kv_dim());
      rope(s.q.data(), batch.positions.data(), T, c.num_heads, c.head_dim, c.rope);
      rope(s.k.data(), batch.positions.data(), T, c.num_kv_heads, c.head_dim, c.rope);
      kv_write(kv.layout, kv.layers[l], s.k.data(), s.v.data(), group.slots.data(), T);
      paged_attention(kv.layout, kv.layers[l], s.q.data(), group.seqs, ap, s.attn.data());
      matmul(L.wo, s.attn.data(), T, s.h2.data());
      add_inplace(s.x.data(), s.h2.data(), T * c.dim);
      // Feed-forward block (SwiGLU).
      rms_norm(s.x.data(), L.ffn_norm.data(), s.xn.data(), T, c.dim, c.norm_eps);
      const MatmulJob gate_up[] = {{&L.w_gate, s.h1.data()}, {&L.w_up, s.h2.data()}};
      matmul_many(gate_up, s.xn.data(), T);
      swiglu(s.h1.data(), s.h2.data(), s.h1.data(), T * c.ffn_dim);
      matmul(L.w_down, s.h1.data(), T, s.h2.data());
      add_inplace(s.x.data(), s.h2.data(), T * c.dim);
    }

    // Head: only the rows that are sampled or scored.
    const int64_t R = static_cast<int64_t>(batch.logit_rows.size());
    gather_rows(s.x, batch.logit_rows, c.dim, s.out_rows);  // [R, dim]
    rms_norm(s.out_rows.data(), output_norm_.data(), s.out_rows.data(), R, c.dim, c.norm_eps);
    matmul(output_, s.out_rows.data(), R, logits);  // [R, vocab]
  }

 private:
  WeightMatrix token_embd_;          // [vocab, dim]
  std::vector<float> output_norm_;   // [dim]
  WeightMatrix output_;              // [vocab, dim]
  std::vector<LlamaLayer> layers_;
};

}  // namespace

std::unique_ptr<Model> load_llama(std::unique_ptr<GgufFile> gguf, ModelConfig config) {
  return std::make_unique<LlamaModel>(std::move(gguf), std::move(config));
}

}  // namespace kvlm
