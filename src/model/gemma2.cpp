// Gemma-2 forward pass, batched over the T tokens of a step: embeddings scaled
// by sqrt(dim) and tied to the head, RMSNorm before and after attention and
// FFN, GELU-tanh gated FFN, NEOX RoPE, attention-logit and final-logit
// soft-capping, and a sliding window on every even layer.
#include <algorithm>
#include <cmath>

#include "backend/backend.h"
#include "common/error.h"
#include "model/model.h"
#include "model/weights.h"

namespace kvlm {
namespace {

struct Gemma2Layer {
  std::vector<float> attn_norm, post_attn_norm;  // [dim]
  WeightMatrix wq, wk, wv, wo;                   // [q_dim, dim], [kv_dim, dim] x2, [dim, q_dim]
  std::vector<float> ffn_norm, post_ffn_norm;    // [dim]
  WeightMatrix w_gate, w_up, w_down;             // [ffn, dim] x2, [dim, ffn]
};

// Even layers use the sliding window (llama.cpp: il % 2 == 0).
bool is_sliding(int32_t layer) { return layer % 2 == 0; }

class Gemma2Model final : public Model {
 public:
  Gemma2Model(std::unique_ptr<GgufFile> gguf, ModelConfig config, const Backend& backend)
      : Model(std::move(gguf), std::move(config), backend) {
    WeightLoader w(*gguf_, backend_);
    ModelConfig& c = config_;
    if (c.sliding_window <= 0)
      throw_error(ErrorCode::kCorrupt, "gemma2: sliding_window {} must be positive", c.sliding_window);
    token_embd_ = w.token_embedding(c);
    output_norm_ = w.vector("output_norm.weight", c.dim);
    output_ = w.output_head(token_embd_, c.vocab_size, c.dim);
    for (int32_t l = 0; l < c.num_layers; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      Gemma2Layer L;
      L.attn_norm = w.vector(p + "attn_norm.weight", c.dim);
      L.wq = w.matrix(p + "attn_q.weight", c.q_dim(), c.dim);
      L.wk = w.matrix(p + "attn_k.weight", c.kv_dim(), c.dim);
      L.wv = w.matrix(p + "attn_v.weight", c.kv_dim(), c.dim);
      L.wo = w.matrix(p + "attn_output.weight", c.dim, c.q_dim());
      L.post_attn_norm = w.vector(p + "post_attention_norm.weight", c.dim);
      L.ffn_norm = w.vector(p + "ffn_norm.weight", c.dim);
      L.w_gate = w.matrix(p + "ffn_gate.weight", c.ffn_dim, c.dim);
      L.w_up = w.matrix(p + "ffn_up.weight", c.ffn_dim, c.dim);
      L.w_down = w.matrix(p + "ffn_down.weight", c.dim, c.ffn_dim);
      L.post_ffn_norm = w.vector(p + "post_ffw_norm.weight", c.dim);
      layers_.push_back(std::move(L));
    }
  }

  // Group 0: full-attention (odd) layers; group 1: sliding-window (even)
  // layers, whose blocks older than the window go back to the pool.
  std::vector<KvGroupSpec> kv_groups() const override {
    KvGroupSpec full, sliding;
    sliding.window = config_.sliding_window;
    for (int32_t l = 0; l < config_.num_layers; ++l) (is_sliding(l) ? sliding : full).layers.push_back(l);
    std::vector<KvGroupSpec> groups;
    if (!full.layers.empty()) groups.push_back(full);
    if (!sliding.layers.empty()) groups.push_back(sliding);
    return groups;
  }

  void forward(const ForwardBatch& batch, const KvCacheView& kv, ForwardScratch& s,
               float* logits) const override {
    const ModelConfig& c = config_;
    const int64_t T = static_cast<int64_t>(batch.tokens.size());
    const int64_t D = c.dim;
    s.x.resize(T * D);              // [T, dim] residual stream
    s.xn.resize(T * D);             // [T, dim] normed sub-layer input
    s.q.resize(T * c.q_dim());      // [T, heads, head_dim]
    s.k.resize(T * c.kv_dim());     // [T, kv_heads, head_dim]
    s.v.resize(T * c.kv_dim());     // [T, kv_heads, head_dim]
    s.attn.resize(T * c.q_dim());   // [T, heads, head_dim]
    s.h1.resize(T * c.ffn_dim);     // [T, ffn] gate, then gelu(gate) * up
    s.h2.resize(T * std::max<int64_t>(c.ffn_dim, D));  // [T, ffn] up; [T, dim] sub-layer output

    const float emb_scale = std::sqrt(static_cast<float>(D));
    for (int64_t t = 0; t < T; ++t) {
      backend_.get_row(token_embd_, batch.tokens[t], &s.x[t * D]);
      backend_.scale_inplace(&s.x[t * D], D, emb_scale);
    }

    AttentionParams ap;
    ap.num_heads = c.num_heads;
    ap.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));  // query scaled by the key length
    ap.softcap = c.attn_softcap;
    for (int32_t l = 0; l < c.num_layers; ++l) {
      const Gemma2Layer& L = layers_[l];
      const KvGroupBatch& group = batch.groups[kv.layer_group[l]];
      ap.window = is_sliding(l) ? c.sliding_window : 0;
      backend_.rms_norm(s.x.data(), L.attn_norm.data(), s.xn.data(), T, D, c.norm_eps);
      const MatmulJob qkv[] = {{&L.wq, s.q.data()}, {&L.wk, s.k.data()}, {&L.wv, s.v.data()}};
      backend_.matmul_many(qkv, s.xn.data(), T);
      add_lora(batch, l, LoraTarget::kQ, s.xn.data(), D, s.q.data(), c.q_dim(), s);
      add_lora(batch, l, LoraTarget::kK, s.xn.data(), D, s.k.data(), c.kv_dim(), s);
      add_lora(batch, l, LoraTarget::kV, s.xn.data(), D, s.v.data(), c.kv_dim(), s);
      backend_.rope(s.q.data(), batch.positions.data(), T, c.num_heads, c.head_dim, c.rope);
      backend_.rope(s.k.data(), batch.positions.data(), T, c.num_kv_heads, c.head_dim, c.rope);
      backend_.kv_write(kv.layout, kv.layers[l], s.k.data(), s.v.data(), group.slots.data(), T);
      backend_.paged_attention(kv.layout, kv.layers[l], s.q.data(), layer_seqs(batch, group, l, s.layer_seq_buffer),
                               ap, s.attn.data());
      backend_.matmul(L.wo, s.attn.data(), T, s.h2.data());
      add_lora(batch, l, LoraTarget::kOut, s.attn.data(), c.q_dim(), s.h2.data(), D, s);
      backend_.rms_norm(s.h2.data(), L.post_attn_norm.data(), s.h2.data(), T, D, c.norm_eps);
      backend_.add_inplace(s.x.data(), s.h2.data(), T * D);

      backend_.rms_norm(s.x.data(), L.ffn_norm.data(), s.xn.data(), T, D, c.norm_eps);
      const MatmulJob gate_up[] = {{&L.w_gate, s.h1.data()}, {&L.w_up, s.h2.data()}};
      backend_.matmul_many(gate_up, s.xn.data(), T);
      add_lora(batch, l, LoraTarget::kGate, s.xn.data(), D, s.h1.data(), c.ffn_dim, s);
      add_lora(batch, l, LoraTarget::kUp, s.xn.data(), D, s.h2.data(), c.ffn_dim, s);
      backend_.geglu(s.h1.data(), s.h2.data(), s.h1.data(), T * c.ffn_dim);
      backend_.matmul(L.w_down, s.h1.data(), T, s.h2.data());
      add_lora(batch, l, LoraTarget::kDown, s.h1.data(), c.ffn_dim, s.h2.data(), D, s);
      backend_.rms_norm(s.h2.data(), L.post_ffn_norm.data(), s.h2.data(), T, D, c.norm_eps);
      backend_.add_inplace(s.x.data(), s.h2.data(), T * D);
    }

    const auto H = static_cast<int64_t>(batch.hidden_rows.size());
    gather_rows(s.x, batch.hidden_rows, D, s.hidden);  // [H, dim]
    backend_.rms_norm(s.hidden.data(), output_norm_.data(), s.hidden.data(), H, D, c.norm_eps);
    const int64_t R = static_cast<int64_t>(batch.logit_rows.size());
    gather_rows(s.x, batch.logit_rows, D, s.out_rows);  // [R, dim]
    backend_.rms_norm(s.out_rows.data(), output_norm_.data(), s.out_rows.data(), R, D, c.norm_eps);
    backend_.matmul(output_, s.out_rows.data(), R, logits);  // [R, vocab]
    if (c.final_softcap > 0.f) backend_.soft_cap(logits, R * c.vocab_size, c.final_softcap);
  }

 private:
  WeightMatrix token_embd_;        // [vocab, dim]
  std::vector<float> output_norm_; // [dim]
  WeightMatrix output_;            // [vocab, dim]
  std::vector<Gemma2Layer> layers_;
};

}  // namespace

std::unique_ptr<Model> load_gemma2(std::unique_ptr<GgufFile> gguf, ModelConfig config, const Backend& backend) {
  return std::make_unique<Gemma2Model>(std::move(gguf), std::move(config), backend);
}

}  // namespace kvlm
