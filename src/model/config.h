// Hyper-parameters of a model, read from GGUF metadata ("{arch}.*" keys).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/cpu/ops.h"
#include "common/metadata.h"

namespace kvlm {

enum class Arch { kLlama, kQwen2, kGpt2, kGemma2 };

// Names accepted in general.architecture, for error messages and `inspect`.
const std::vector<std::string>& supported_architectures();

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
  int32_t ffn_dim = 0;          // feed_forward_length
  int32_t context_length = 0;   // trained context
  float norm_eps = 1e-5f;       // RMSNorm or LayerNorm epsilon
  RopeParams rope;              // unused by GPT-2 (learned positions)
  float attn_softcap = 0.f;     // Gemma-2 attention-logit soft-capping (0 = off)
  float final_softcap = 0.f;    // Gemma-2 final-logit soft-capping (0 = off)
  int32_t sliding_window = 0;   // Gemma-2: window of the sliding layers (0 = none)

  // Reads and validates the hyper-parameters. Throws Error(kUnsupported) for an
  // unknown architecture (naming it and the supported ones) and Error(kCorrupt)
  // for missing or inconsistent values.
  static ModelConfig from_metadata(const Metadata& m);

  int32_t q_dim() const { return num_heads * head_dim; }
  int32_t kv_dim() const { return num_kv_heads * head_dim; }
  // One line per field, for `kvlm inspect`.
  std::string describe() const;
};

}  // namespace kvlm
