// The weights of the llama-style decoder families (llama, Mistral, Mixtral,
// Qwen2, Qwen2-MoE, Qwen3, Qwen3-MoE, Phi-3) as one layer layout, read from
// each family's GGUF tensor names. The forward pass is llama.cpp (this
// folder's), which reads only this struct.
#pragma once

#include <string>
#include <vector>

#include "model/config.h"
#include "model/moe.h"
#include "model/weights.h"

namespace kvlm {

struct LlamaLayer {
  std::vector<float> attn_norm;          // [dim]
  // [q_dim, dim], [kv_dim, dim] x2, [dim, q_dim]. Phi-3's q, k and v are row
  // ranges of its one fused attn_qkv matrix.
  WeightMatrix wq, wk, wv, wo;
  std::vector<float> bq, bk, bv;         // [q_dim], [kv_dim] x2; Qwen2 and Qwen2-MoE only, else empty
  std::vector<float> q_norm, k_norm;     // [head_dim]: Qwen3's RMSNorm of each head before RoPE, else empty
  std::vector<float> ffn_norm;           // [dim]
  // Dense SwiGLU: [ffn, dim] x2, [dim, ffn]. Phi-3's gate and up are the two
  // halves of its fused ffn_up (gate first). Empty when the layer has experts.
  WeightMatrix w_gate, w_up, w_down;
  MoeWeights moe;                        // when config.moe.enabled()
};

// Layer l's tensors ("blk.l.*") for c.arch. Throws Error(kCorrupt) naming a
// missing or mis-shaped tensor.
LlamaLayer load_llama_layer(const WeightLoader& w, const ModelConfig& c, int32_t l);

// The RoPE frequency factors of the file, [rot_dim / 2], or empty: llama3
// scaling's rope_freqs, or Phi-3's rope_factors_long when max_context
// exceeds the original context and rope_factors_short otherwise (llama.cpp's
// choice by its context per sequence; max_context 0 means the trained one).
std::vector<float> load_rope_factors(const WeightLoader& w, const ModelConfig& c, int32_t max_context);

}  // namespace kvlm
