// Random-weight GGUF files of real models' shapes (`kvlm make-model`), so
// anyone can benchmark a model's speed without downloading its weights. The
// files use llama.cpp's tensor and metadata names, so llama.cpp loads them too.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backend/dtype.h"

namespace kvlm {

// splitmix64: a tiny generator whose stream is fixed by its seed on every
// platform (std's distributions are not specified bit for bit); make_model's
// and make_lora's random weights both come from it.
inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// RoPE scaling written into the file the way llama.cpp's converter does.
struct RopeScalingShape {
  // "none"; "llama3" (llama arch: a rope_freqs tensor computed from the four
  // numbers below); "longrope" (phi3: rope_factors_long/short tensors and
  // rope.scaling.attn_factor, against original_context).
  std::string type = "none";
  float factor = 8.0f;           // llama3: the slowest pairs' slow-down
  float low_freq_factor = 1.0f;  // llama3: wavelengths above original_context / low_freq_factor get `factor`
  float high_freq_factor = 4.0f; // llama3: wavelengths below original_context / high_freq_factor keep 1
  int32_t original_context = 0;  // the context the model was pre-trained at
};

// The shape and metadata of a model of the llama-style families.
struct ModelShape {
  // llama (Mixtral when it has experts), qwen2 (Q/K/V biases, neox rope),
  // qwen2moe, qwen3 (per-head Q/K norms), qwen3moe, phi3 (fused matrices).
  std::string arch = "llama";
  std::string name;            // general.name
  int32_t dim = 0;
  int32_t num_layers = 0;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;        // 0: dim / num_heads (Qwen3 sets its own)
  int32_t ffn_dim = 0;         // the dense FFN's width (Qwen2-MoE: the shared expert's default)
  int32_t context_length = 2048;
  float rope_base = 10000.0f;
  float norm_eps = 1e-5f;
  bool tied_embeddings = false;  // no output.weight: the embedding table is the head
  std::optional<int32_t> vocab_size;  // unset: the tokenizer's vocabulary size
  int32_t num_experts = 0;       // 0: dense FFN
  int32_t num_experts_used = 0;  // top-k
  int32_t expert_ffn_dim = 0;    // qwen2moe/qwen3moe: each expert's width (Mixtral's is ffn_dim)
  int32_t shared_expert_ffn_dim = 0;  // qwen2moe's shared expert
  RopeScalingShape rope_scaling;
  int32_t sliding_window = 0;    // phi3 (0 = none)
  // qwen3: a reranker as llama.cpp's converter writes Qwen3-Reranker
  // (pooling_type 4, classifier.output_labels ["yes", "no"], the rerank
  // template, cls.output.weight = the head's rows of the tokens "yes" and
  // "no", which the vocabulary must have).
  bool rank_head = false;

  int32_t head_size() const { return head_dim > 0 ? head_dim : dim / num_heads; }
};

// "tinyllama-1.1b", "llama-3-8b", "mixtral-8x7b", ... (model_preset_names());
// nullopt for other names.
std::optional<ModelShape> model_preset(std::string_view name);
const std::vector<std::string>& model_preset_names();

struct MakeModelOptions {
  ModelShape shape;
  DType type = DType::kQ4_0;  // 2-D and expert matrices; 1-D tensors and routers stay F32
  std::string vocab_from;     // GGUF whose tokenizer.* metadata is copied
  std::string out_path;
  uint64_t seed = 0;
  // Standard deviation of the random matrices. Real models are near 0.02;
  // tiny test models want more (0.3 at dim 64) so attention and routing are
  // sharp and a wrong forward pass shows in the logits.
  float weight_std = 0.02f;
};

struct MakeModelResult {
  uint64_t file_bytes = 0;
  int64_t num_params = 0;
};

// Writes a GGUF of `options.shape`: matrices drawn from N(0, weight_std^2)
// and quantized row by row on the compute threads (parallel_for), norms 1.0,
// biases N(0, weight_std^2), streamed to the file tensor by tensor. Each
// row's values depend only on (seed, tensor, row), so the file is the same for a
// seed whatever the thread count. A matrix whose row length is not a multiple
// of the type's block size gets the nearest type that fits (Q4_K -> Q4_0,
// Q6_K -> Q8_0, then F16); each such choice is reported through `log`, as is
// progress. Throws Error(kInvalidArgument) for an invalid shape or I/O error,
// and the vocabulary file's own errors.
MakeModelResult make_model(const MakeModelOptions& options, const std::function<void(const std::string&)>& log);

}  // namespace kvlm
