// Llama-family forward pass, batched over the T tokens of a step: llama,
// Mistral, Mixtral, Qwen2, Qwen2-MoE, Qwen3, Qwen3-MoE and Phi-3 differ only
// in what a layer holds (llama_weights.h): Q/K/V biases, per-head Q/K norms,
// fused matrices (split at load), a sliding window, RoPE frequency factors,
// and experts in place of the dense FFN. Straight-line, in the spirit of
// llama2.c: the shape of every buffer is written beside it.
#include <algorithm>
#include <cmath>

#include "backend/backend.h"
#include "common/assert.h"
#include "model/llama_weights.h"
#include "model/model.h"

namespace kvlm {
namespace {

class LlamaModel final : public Model {
 public:
  LlamaModel(std::unique_ptr<GgufFile> gguf, ModelConfig config, const ModelLoadOptions& options,
             const Backend& backend)
      : Model(std::move(gguf), std::move(config), backend) {
    WeightLoader w(*gguf_, backend_);
    ModelConfig& c = config_;
    token_embd_ = w.token_embedding(c);
    output_norm_ = w.vector("output_norm.weight", c.dim);
    // Tied embeddings: no output.weight, the embedding matrix is the head.
    output_ = w.output_head(token_embd_, c.vocab_size, c.dim);
    for (int32_t l = 0; l < c.num_layers; ++l) layers_.push_back(load_llama_layer(w, c, l));
    // The factors live in this model; the config's RoPE points at them (and
    // so does the runner's KV re-rotation, which reads config().rope).
    rope_factors_ = load_rope_factors(w, c, options.max_context);
    if (!rope_factors_.empty()) c.rope.freq_factors = rope_factors_.data();
  }

  // Phi-3 attends through a window on every layer: one group whose blocks
  // older than the window go back to the pool.
  std::vector<KvGroupSpec> kv_groups() const override {
    std::vector<KvGroupSpec> groups = Model::kv_groups();
    if (config_.arch == Arch::kPhi3) groups[0].window = config_.sliding_window;
    return groups;
  }

  bool blends_kv_chunks() const override { return config_.arch != Arch::kPhi3; }

  void forward(const ForwardBatch& batch, const KvCacheView& kv, ForwardScratch& s,
               float* logits) const override {
    const ModelConfig& c = config_;
    const int64_t T = static_cast<int64_t>(batch.tokens.size());
    KVLM_ASSERT(batch.positions.size() == batch.tokens.size(), "one position per token");
    const int64_t ffn = c.moe.enabled() ? 0 : c.ffn_dim;
    s.x.resize(T * c.dim);          // [T, dim] residual stream
    s.xn.resize(T * c.dim);         // [T, dim] normed input of a sub-layer
    s.q.resize(T * c.q_dim());      // [T, heads, head_dim]
    s.k.resize(T * c.kv_dim());     // [T, kv_heads, head_dim]
    s.v.resize(T * c.kv_dim());     // [T, kv_heads, head_dim]
    s.attn.resize(T * c.q_dim());   // [T, heads, head_dim] attention output
    s.h1.resize(T * ffn);           // [T, ffn] gate, then silu(gate) * up
    s.h2.resize(T * std::max<int64_t>(ffn, c.dim));  // [T, ffn] up; [T, dim] sub-layer output
    if (c.moe.enabled()) s.moe_stats.reset(c.num_layers, c.moe.num_experts);

    for (int64_t t = 0; t < T; ++t) backend_.get_row(token_embd_, batch.tokens[t], &s.x[t * c.dim]);
    const int32_t num_layers = batch.num_layers > 0 ? std::min(batch.num_layers, c.num_layers) : c.num_layers;
    for (int32_t l = 0; l < num_layers; ++l) {
      attention_block(l, batch, kv, s);
      if (l + 1 == batch.num_layers) return;  // a probe: the last layer's K/V are all it wants
      backend_.add_inplace(s.x.data(), s.h2.data(), T * c.dim);
      ffn_block(l, batch, s);
      backend_.add_inplace(s.x.data(), s.h2.data(), T * c.dim);
    }

    const auto H = static_cast<int64_t>(batch.hidden_rows.size());
    gather_rows(s.x, batch.hidden_rows, c.dim, s.hidden);  // [H, dim]
    backend_.rms_norm(s.hidden.data(), output_norm_.data(), s.hidden.data(), H, c.dim, c.norm_eps);
    // Head: only the rows that are sampled or scored.
    const int64_t R = static_cast<int64_t>(batch.logit_rows.size());
    gather_rows(s.x, batch.logit_rows, c.dim, s.out_rows);  // [R, dim]
    backend_.rms_norm(s.out_rows.data(), output_norm_.data(), s.out_rows.data(), R, c.dim, c.norm_eps);
    backend_.matmul(output_, s.out_rows.data(), R, logits);  // [R, vocab]
  }

 private:
  // s.h2 ([T, dim]) = layer l's attention over the normed residual stream;
  // the layer's K and V are written into the cache on the way.
  void attention_block(int32_t l, const ForwardBatch& batch, const KvCacheView& kv, ForwardScratch& s) const {
    const ModelConfig& c = config_;
    const LlamaLayer& L = layers_[l];
    const int64_t T = static_cast<int64_t>(batch.tokens.size());
    const KvGroupBatch& group = batch.groups[kv.layer_group[l]];
    backend_.rms_norm(s.x.data(), L.attn_norm.data(), s.xn.data(), T, c.dim, c.norm_eps);
    const MatmulJob qkv[] = {{&L.wq, s.q.data()}, {&L.wk, s.k.data()}, {&L.wv, s.v.data()}};
    backend_.matmul_many(qkv, s.xn.data(), T);
    add_lora(batch, l, LoraTarget::kQ, s.xn.data(), c.dim, s.q.data(), c.q_dim(), s);
    add_lora(batch, l, LoraTarget::kK, s.xn.data(), c.dim, s.k.data(), c.kv_dim(), s);
    add_lora(batch, l, LoraTarget::kV, s.xn.data(), c.dim, s.v.data(), c.kv_dim(), s);
    if (!L.bq.empty()) backend_.add_bias(s.q.data(), L.bq.data(), T, c.q_dim());
    if (!L.bk.empty()) backend_.add_bias(s.k.data(), L.bk.data(), T, c.kv_dim());
    if (!L.bv.empty()) backend_.add_bias(s.v.data(), L.bv.data(), T, c.kv_dim());
    if (!L.q_norm.empty()) {
      // Qwen3: every head of q and k normed on its own, before RoPE.
      backend_.rms_norm(s.q.data(), L.q_norm.data(), s.q.data(), T * c.num_heads, c.head_dim, c.norm_eps);
      backend_.rms_norm(s.k.data(), L.k_norm.data(), s.k.data(), T * c.num_kv_heads, c.head_dim, c.norm_eps);
    }
    backend_.rope(s.q.data(), batch.positions.data(), T, c.num_heads, c.head_dim, c.rope);
    backend_.rope(s.k.data(), batch.positions.data(), T, c.num_kv_heads, c.head_dim, c.rope);
    if (l + 1 == batch.num_layers && !batch.kv_deviation.empty())
      backend_.kv_deviation(kv.layout, kv.layers[l], s.k.data(), s.v.data(), group.slots.data(), T,
                            batch.kv_deviation.data());
    backend_.kv_write(kv.layout, kv.layers[l], s.k.data(), s.v.data(), group.slots.data(), T);
    if (l + 1 == batch.num_layers) return;  // a probe's last layer: its K/V are written, nothing reads its output
    AttentionParams ap;
    ap.num_heads = c.num_heads;
    ap.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    ap.window = c.arch == Arch::kPhi3 ? c.sliding_window : 0;
    backend_.paged_attention(kv.layout, kv.layers[l], s.q.data(), layer_seqs(batch, group, l, s.layer_seq_buffer),
                             ap, s.attn.data());
    backend_.matmul(L.wo, s.attn.data(), T, s.h2.data());
    add_lora(batch, l, LoraTarget::kOut, s.attn.data(), c.q_dim(), s.h2.data(), c.dim, s);
  }

  // s.h2 ([T, dim]) = layer l's feed-forward block (SwiGLU, or its experts)
  // over the normed residual stream.
  void ffn_block(int32_t l, const ForwardBatch& batch, ForwardScratch& s) const {
    const ModelConfig& c = config_;
    const int64_t T = static_cast<int64_t>(batch.tokens.size());
    const LlamaLayer& L = layers_[l];
    backend_.rms_norm(s.x.data(), L.ffn_norm.data(), s.xn.data(), T, c.dim, c.norm_eps);
    if (c.moe.enabled()) {
      moe_ffn(backend_, L.moe, c.moe, s.xn.data(), T, c.dim, s.moe, s.h2.data(), s.moe_stats, l);
      return;
    }
    const MatmulJob gate_up[] = {{&L.w_gate, s.h1.data()}, {&L.w_up, s.h2.data()}};
    backend_.matmul_many(gate_up, s.xn.data(), T);
    add_lora(batch, l, LoraTarget::kGate, s.xn.data(), c.dim, s.h1.data(), c.ffn_dim, s);
    add_lora(batch, l, LoraTarget::kUp, s.xn.data(), c.dim, s.h2.data(), c.ffn_dim, s);
    backend_.swiglu(s.h1.data(), s.h2.data(), s.h1.data(), T * c.ffn_dim);
    backend_.matmul(L.w_down, s.h1.data(), T, s.h2.data());
    add_lora(batch, l, LoraTarget::kDown, s.h1.data(), c.ffn_dim, s.h2.data(), c.dim, s);
  }

  WeightMatrix token_embd_;          // [vocab, dim]
  std::vector<float> output_norm_;   // [dim]
  WeightMatrix output_;              // [vocab, dim]
  std::vector<LlamaLayer> layers_;
  std::vector<float> rope_factors_;  // [rot_dim / 2] or empty; config_.rope.freq_factors points here
};

}  // namespace

std::unique_ptr<Model> load_llama(std::unique_ptr<GgufFile> gguf, ModelConfig config, const ModelLoadOptions& options,
                                  const Backend& backend) {
  return std::make_unique<LlamaModel>(std::move(gguf), std::move(config), options, backend);
}

}  // namespace kvlm
