// Hyper-parameters of a model, read from GGUF metadata ("{arch}.*" keys).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/rope_params.h"
#include "common/metadata.h"

namespace kvlm {

// Model families by their forward pass. Mixtral is kLlama with experts.
enum class Arch { kLlama, kQwen2, kQwen2Moe, kQwen3, kQwen3Moe, kPhi3, kGpt2, kGemma2 };

// Names accepted in general.architecture, for error messages and `inspect`.
const std::vector<std::string>& supported_architectures();

// A mixture-of-experts feed-forward block: a router picks num_experts_used
// of num_experts SwiGLU experts per token by softmax probability.
// num_experts == 0: the model's FFN is dense.
struct MoeConfig {
  int32_t num_experts = 0;       // expert_count
  int32_t num_experts_used = 0;  // expert_used_count (top-k)
  int32_t expert_ffn_dim = 0;    // each expert's hidden width
  int32_t shared_ffn_dim = 0;    // Qwen2-MoE's always-on shared expert, gated by a sigmoid; 0 = none
  // Whether the k chosen probabilities are divided by their sum (Mixtral,
  // Qwen3-MoE) or weight the experts as they are (Qwen2-MoE).
  bool normalize_weights = false;
  bool enabled() const { return num_experts > 0; }
};

struct ModelConfig {
  Arch arch = Arch::kLlama;
  std::string arch_name;        // general.architecture as written in the file
  std::string name;             // general.name, if any
  int32_t vocab_size = 0;
  int32_t dim = 0;              // embedding_length
  int32_t num_layers = 0;       // block_count
  int32_t num_heads = 0;        // attention.head_count
  int32_t num_kv_heads = 0;     // attention.head_count_kv (GQA), defaults to num_heads
  int32_t head_dim = 0;         // attention.key_length, defaults to dim / num_heads
  int32_t ffn_dim = 0;          // feed_forward_length (the dense FFN's width)
  int32_t context_length = 0;   // trained context
  float norm_eps = 1e-5f;       // RMSNorm or LayerNorm epsilon
  // Unused by GPT-2 (learned positions). rope.freq_factors is set by the
  // model from its tensors (rope_freqs, rope_factors_long/short).
  RopeParams rope;
  // rope.scaling.original_context_length (0 = none): Phi-3's long-rope uses
  // its long factors when the context per sequence exceeds it.
  int32_t rope_original_context = 0;
  float attn_softcap = 0.f;     // Gemma-2 attention-logit soft-capping (0 = off)
  float final_softcap = 0.f;    // Gemma-2 final-logit soft-capping (0 = off)
  // Gemma-2: window of its sliding layers; Phi-3: window of every layer
  // (0 = none, as Phi-4 writes it).
  int32_t sliding_window = 0;
  MoeConfig moe;
  // pooling_type as llama.cpp writes it for embedding models (0 none, 1 mean,
  // 2 cls, 3 last, 4 rank); -1: the file says nothing (the server's
  // --pooling decides).
  int32_t pooling_type = -1;

  // Reads and validates the hyper-parameters. Throws Error(kUnsupported) for an
  // unknown architecture (naming it and the supported ones) or a feature kvlm
  // does not implement (naming the key), and Error(kCorrupt) for missing or
  // inconsistent values.
  static ModelConfig from_metadata(const Metadata& m);

  int32_t q_dim() const { return num_heads * head_dim; }
  int32_t kv_dim() const { return num_kv_heads * head_dim; }
  // One line per field, for `kvlm inspect`.
  std::string describe() const;
};

}  // namespace kvlm
