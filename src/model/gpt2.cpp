// GPT-2 forward pass, batched over the T tokens of a step: learned position
// embeddings, LayerNorm with bias, fused QKV projection with bias, GELU MLP.
#include <algorithm>
#include <cmath>

#include "backend/backend.h"
#include "common/assert.h"
#include "common/error.h"
#include "model/model.h"
#include "model/weights.h"

namespace kvlm {
namespace {

struct Gpt2Layer {
  std::vector<float> attn_norm, attn_norm_b;  // [dim]
  WeightMatrix w_qkv;                         // [3 * dim, dim]
  std::vector<float> b_qkv;                   // [3 * dim]
  WeightMatrix wo;                            // [dim, dim]
  std::vector<float> bo;                      // [dim]
  std::vector<float> ffn_norm, ffn_norm_b;    // [dim]
  WeightMatrix w_up;                          // [ffn, dim]
  std::vector<float> b_up;                    // [ffn]
  WeightMatrix w_down;                        // [dim, ffn]
  std::vector<float> b_down;                  // [dim]
};

class Gpt2Model final : public Model {
 public:
  Gpt2Model(std::unique_ptr<GgufFile> gguf, ModelConfig config, const Backend& backend)
      : Model(std::move(gguf), std::move(config), backend) {
    WeightLoader w(*gguf_, backend_);
    ModelConfig& c = config_;
    if (c.num_kv_heads != c.num_heads)
      throw_error(ErrorCode::kCorrupt, "gpt2: head_count_kv {} != head_count {}", c.num_kv_heads, c.num_heads);
    token_embd_ = w.token_embedding(c);
    position_embd_ = w.matrix("position_embd.weight", c.context_length, c.dim);
    output_norm_ = w.vector("output_norm.weight", c.dim);
    output_norm_b_ = w.vector("output_norm.bias", c.dim);
    output_ = w.output_head(token_embd_, c.vocab_size, c.dim);
    for (int32_t l = 0; l < c.num_layers; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      Gpt2Layer L;
      L.attn_norm = w.vector(p + "attn_norm.weight", c.dim);
      L.attn_norm_b = w.vector(p + "attn_norm.bias", c.dim);
      L.w_qkv = w.matrix(p + "attn_qkv.weight", 3 * c.dim, c.dim);
      L.b_qkv = w.vector(p + "attn_qkv.bias", 3 * c.dim);
      L.wo = w.matrix(p + "attn_output.weight", c.dim, c.dim);
      L.bo = w.vector(p + "attn_output.bias", c.dim);
      L.ffn_norm = w.vector(p + "ffn_norm.weight", c.dim);
      L.ffn_norm_b = w.vector(p + "ffn_norm.bias", c.dim);
      L.w_up = w.matrix(p + "ffn_up.weight", c.ffn_dim, c.dim);
      L.b_up = w.vector(p + "ffn_up.bias", c.ffn_dim);
      L.w_down = w.matrix(p + "ffn_down.weight", c.dim, c.ffn_dim);
      L.b_down = w.vector(p + "ffn_down.bias", c.dim);
      layers_.push_back(std::move(L));
    }
  }

  std::optional<int32_t> max_positions() const override { return config_.context_length; }

  void forward(const ForwardBatch& batch, const KvCacheView& kv, ForwardScratch& s,
               float* logits) const override {
    const ModelConfig& c = config_;
    const int64_t T = static_cast<int64_t>(batch.tokens.size());
    const int64_t D = c.dim;
    s.x.resize(T * D);            // [T, dim] residual stream
    s.xn.resize(T * D);           // [T, dim] normed sub-layer input
    s.q.resize(T * 3 * D);        // [T, 3 * dim] fused q | k | v
    s.k.resize(T * D);            // [T, heads, head_dim]
    s.v.resize(T * D);            // [T, heads, head_dim]
    s.attn.resize(T * 2 * D);     // [T, dim] q, then [T, dim] attention output
    s.h1.resize(T * c.ffn_dim);   // [T, ffn]
    s.h2.resize(T * D);           // [T, dim] sub-layer output

    std::vector<float> pos_row(D);
    for (int64_t t = 0; t < T; ++t) {
      KVLM_ASSERT(batch.positions[t] < c.context_length, "position within the learned table");
      backend_.get_row(token_embd_, batch.tokens[t], &s.x[t * D]);
      backend_.get_row(position_embd_, batch.positions[t], pos_row.data());
      backend_.add_inplace(&s.x[t * D], pos_row.data(), D);
    }

    AttentionParams ap;
    ap.num_heads = c.num_heads;
    ap.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    float* q = s.attn.data();          // [T, dim]
    float* attn_out = q + T * D;       // [T, dim]
    for (int32_t l = 0; l < c.num_layers; ++l) {
      const Gpt2Layer& L = layers_[l];
      const KvGroupBatch& group = batch.groups[kv.layer_group[l]];
      backend_.layer_norm(s.x.data(), L.attn_norm.data(), L.attn_norm_b.data(), s.xn.data(), T, D, c.norm_eps);
      backend_.matmul(L.w_qkv, s.xn.data(), T, s.q.data());
      add_lora(batch, l, LoraTarget::kQkv, s.xn.data(), D, s.q.data(), 3 * D, s);
      backend_.add_bias(s.q.data(), L.b_qkv.data(), T, 3 * D);
      for (int64_t t = 0; t < T; ++t) {  // split the fused rows
        const float* row = &s.q[t * 3 * D];
        std::copy_n(row, D, q + t * D);
        std::copy_n(row + D, D, &s.k[t * D]);
        std::copy_n(row + 2 * D, D, &s.v[t * D]);
      }
      backend_.kv_write(kv.layout, kv.layers[l], s.k.data(), s.v.data(), group.slots.data(), T);
      backend_.paged_attention(kv.layout, kv.layers[l], q, layer_seqs(batch, group, l, s.layer_seq_buffer), ap,
                               attn_out);
      backend_.matmul(L.wo, attn_out, T, s.h2.data());
      add_lora(batch, l, LoraTarget::kOut, attn_out, D, s.h2.data(), D, s);
      backend_.add_bias(s.h2.data(), L.bo.data(), T, D);
      backend_.add_inplace(s.x.data(), s.h2.data(), T * D);

      backend_.layer_norm(s.x.data(), L.ffn_norm.data(), L.ffn_norm_b.data(), s.xn.data(), T, D, c.norm_eps);
      backend_.matmul(L.w_up, s.xn.data(), T, s.h1.data());
      add_lora(batch, l, LoraTarget::kUp, s.xn.data(), D, s.h1.data(), c.ffn_dim, s);
      backend_.add_bias(s.h1.data(), L.b_up.data(), T, c.ffn_dim);
      backend_.gelu(s.h1.data(), T * c.ffn_dim);
      backend_.matmul(L.w_down, s.h1.data(), T, s.h2.data());
      add_lora(batch, l, LoraTarget::kDown, s.h1.data(), c.ffn_dim, s.h2.data(), D, s);
      backend_.add_bias(s.h2.data(), L.b_down.data(), T, D);
      backend_.add_inplace(s.x.data(), s.h2.data(), T * D);
    }

    const auto H = static_cast<int64_t>(batch.hidden_rows.size());
    gather_rows(s.x, batch.hidden_rows, D, s.hidden);  // [H, dim]
    backend_.layer_norm(s.hidden.data(), output_norm_.data(), output_norm_b_.data(), s.hidden.data(), H, D,
                        c.norm_eps);
    const int64_t R = static_cast<int64_t>(batch.logit_rows.size());
    gather_rows(s.x, batch.logit_rows, D, s.out_rows);  // [R, dim]
    backend_.layer_norm(s.out_rows.data(), output_norm_.data(), output_norm_b_.data(), s.out_rows.data(), R, D,
                        c.norm_eps);
    backend_.matmul(output_, s.out_rows.data(), R, logits);  // [R, vocab]
  }

 private:
  WeightMatrix token_embd_;      // [vocab, dim]
  WeightMatrix position_embd_;   // [context, dim]
  std::vector<float> output_norm_, output_norm_b_;
  WeightMatrix output_;          // [vocab, dim]
  std::vector<Gpt2Layer> layers_;
};

}  // namespace

std::unique_ptr<Model> load_gpt2(std::unique_ptr<GgufFile> gguf, ModelConfig config, const Backend& backend) {
  return std::make_unique<Gpt2Model>(std::move(gguf), std::move(config), backend);
}

}  // namespace kvlm
