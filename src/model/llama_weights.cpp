#include "model/llama_weights.h"

#include "common/error.h"

namespace kvlm {
namespace {

void load_attention(const WeightLoader& w, const ModelConfig& c, const std::string& p, LlamaLayer& L) {
  if (c.arch == Arch::kPhi3) {
    // One [q_dim + 2 kv_dim, dim] matrix: q rows, then k rows, then v rows.
    auto qkv = w.split_rows(p + "attn_qkv.weight", {c.q_dim(), c.kv_dim(), c.kv_dim()}, c.dim);
    L.wq = qkv[0];
    L.wk = qkv[1];
    L.wv = qkv[2];
  } else {
    L.wq = w.matrix(p + "attn_q.weight", c.q_dim(), c.dim);
    L.wk = w.matrix(p + "attn_k.weight", c.kv_dim(), c.dim);
    L.wv = w.matrix(p + "attn_v.weight", c.kv_dim(), c.dim);
  }
  L.wo = w.matrix(p + "attn_output.weight", c.dim, c.q_dim());
  L.bq = w.optional_vector(p + "attn_q.bias", c.q_dim());
  L.bk = w.optional_vector(p + "attn_k.bias", c.kv_dim());
  L.bv = w.optional_vector(p + "attn_v.bias", c.kv_dim());
  if (c.arch == Arch::kQwen3 || c.arch == Arch::kQwen3Moe) {
    L.q_norm = w.vector(p + "attn_q_norm.weight", c.head_dim);
    L.k_norm = w.vector(p + "attn_k_norm.weight", c.head_dim);
  }
}

void load_ffn(const WeightLoader& w, const ModelConfig& c, const std::string& p, LlamaLayer& L) {
  if (c.moe.enabled()) {
    L.moe = load_moe_weights(w, p, c);
  } else if (c.arch == Arch::kPhi3) {
    auto gate_up = w.split_rows(p + "ffn_up.weight", {c.ffn_dim, c.ffn_dim}, c.dim);
    L.w_gate = gate_up[0];
    L.w_up = gate_up[1];
    L.w_down = w.matrix(p + "ffn_down.weight", c.dim, c.ffn_dim);
  } else {
    L.w_gate = w.matrix(p + "ffn_gate.weight", c.ffn_dim, c.dim);
    L.w_up = w.matrix(p + "ffn_up.weight", c.ffn_dim, c.dim);
    L.w_down = w.matrix(p + "ffn_down.weight", c.dim, c.ffn_dim);
  }
}

}  // namespace

LlamaLayer load_llama_layer(const WeightLoader& w, const ModelConfig& c, int32_t l) {
  const std::string p = "blk." + std::to_string(l) + ".";
  LlamaLayer L;
  L.attn_norm = w.vector(p + "attn_norm.weight", c.dim);
  load_attention(w, c, p, L);
  L.ffn_norm = w.vector(p + "ffn_norm.weight", c.dim);
  load_ffn(w, c, p, L);
  return L;
}

std::vector<float> load_rope_factors(const WeightLoader& w, const ModelConfig& c, int32_t max_context) {
  std::string name = "rope_freqs.weight";
  if (c.arch == Arch::kPhi3) {
    // llama.cpp: long factors when the context per sequence exceeds the
    // original context (the trained one when the file does not say).
    const int32_t context = max_context > 0 ? max_context : c.context_length;
    const int32_t original = c.rope_original_context > 0 ? c.rope_original_context : c.context_length;
    name = context > original ? "rope_factors_long.weight" : "rope_factors_short.weight";
  }
  std::vector<float> factors = w.optional_vector(name, c.rope.rot_dim / 2);
  for (float f : factors)
    if (!(f > 0.f)) throw_error(ErrorCode::kCorrupt, "{} holds {}; every factor must be positive", name, f);
  return factors;
}

}  // namespace kvlm
