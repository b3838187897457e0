// Random-weight GGUF files of real models' shapes (`kvlm make-model`), so
// anyone can benchmark a model's speed without downloading its weights.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backend/dtype.h"

namespace kvlm {

// The shape and metadata of a llama-family model (llama or qwen2).
struct ModelShape {
  std::string arch = "llama";  // "llama" or "qwen2" (Q/K/V biases, neox rope)
  std::string name;            // general.name
  int32_t dim = 0;
  int32_t num_layers = 0;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t ffn_dim = 0;
  int32_t context_length = 2048;
  float rope_base = 10000.0f;
  float norm_eps = 1e-5f;
  bool tied_embeddings = false;  // no output.weight: the embedding table is the head
  std::optional<int32_t> vocab_size;  // unset: the tokenizer's vocabulary size
};

// "tinyllama-1.1b", "qwen2.5-0.5b", "llama-3.2-1b"; nullopt for other names.
std::optional<ModelShape> model_preset(std::string_view name);
const std::vector<std::string>& model_preset_names();

struct MakeModelOptions {
  ModelShape shape;
  DType type = DType::kQ4_0;  // 2-D matrices; 1-D tensors stay F32
  std::string vocab_from;     // GGUF whose tokenizer.* metadata is copied
  std::string out_path;
  uint64_t seed = 0;
};

struct MakeModelResult {
  uint64_t file_bytes = 0;
  int64_t num_params = 0;
};

// Writes a GGUF of `options.shape`: matrices drawn from N(0, 0.02^2) and
// quantized row by row on the compute threads (parallel_for), norms 1.0,
// biases N(0, 0.02^2), streamed to the file tensor by tensor. Each row's
// values depend only on (seed, tensor, row), so the file is the same for a
// seed whatever the thread count. A matrix whose row length is not a multiple
// of the type's block size gets the nearest type that fits (Q4_K -> Q4_0,
// Q6_K -> Q8_0, then F16); each such choice is reported through `log`, as is
// progress. Throws Error(kInvalidArgument) for an invalid shape or I/O error,
// and the vocabulary file's own errors.
MakeModelResult make_model(const MakeModelOptions& options, const std::function<void(const std::string&)>& log);

}  // namespace kvlm
