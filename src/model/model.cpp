#include "model/model.h"

#include <algorithm>

#include "common/error.h"
#include "model/hf_checkpoint.h"
#include "model/quantize_tensors.h"

namespace kvlm {

std::vector<KvGroupSpec> Model::kv_groups() const {
  KvGroupSpec all;
  for (int32_t l = 0; l < config_.num_layers; ++l) all.layers.push_back(l);
  return {all};
}

std::unique_ptr<Model> Model::load(std::unique_ptr<GgufFile> gguf, const ModelLoadOptions& options) {
  if (options.quantize) gguf = convert_tensors(std::move(gguf), *options.quantize);
  ModelConfig config = ModelConfig::from_metadata(gguf->metadata());
  const Backend& backend = options.backend != nullptr ? *options.backend : default_backend();
  switch (config.arch) {
    case Arch::kLlama:
    case Arch::kQwen2:
    case Arch::kQwen2Moe:
    case Arch::kQwen3:
    case Arch::kQwen3Moe:
    case Arch::kPhi3:
      return load_llama(std::move(gguf), std::move(config), options, backend);
    case Arch::kGpt2:
      return load_gpt2(std::move(gguf), std::move(config), backend);
    case Arch::kGemma2:
      return load_gemma2(std::move(gguf), std::move(config), backend);
  }
  throw_error(ErrorCode::kInternal, "unhandled architecture '{}'", config.arch_name);
}

void gather_rows(const std::vector<float>& x, std::span<const int32_t> rows, int64_t dim, std::vector<float>& out) {
  out.resize(rows.size() * static_cast<size_t>(dim));
  for (size_t r = 0; r < rows.size(); ++r)
    std::copy_n(&x[static_cast<size_t>(rows[r]) * dim], dim, &out[r * dim]);
}

std::unique_ptr<Model> Model::load(const std::string& path, const ModelLoadOptions& options) {
  return load(open_model_file(path), options);
}

}  // namespace kvlm
