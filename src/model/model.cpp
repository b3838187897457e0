#include "model/model.h"

#include "common/error.h"

namespace kvlm {

std::vector<KvGroupSpec> Model::kv_groups() const {
  KvGroupSpec all;
  for (int32_t l = 0; l < config_.num_layers; ++l) all.layers.push_back(l);
  return {all};
}

std::unique_ptr<Model> Model::load(std::unique_ptr<GgufFile> gguf) {
  ModelConfig config = ModelConfig::from_metadata(gguf->metadata());
  switch (config.arch) {
    case Arch::kLlama:
    case Arch::kQwen2:
      return load_llama(std::move(gguf), std::move(config));
    default:
      throw_error(ErrorCode::kUnsupported, "architecture '{}' is recognised but not implemented yet",
                  config.arch_name);
  }
}

std::unique_ptr<Model> Model::load(const std::string& path) { return load(GgufFile::open(path)); }

}  // namespace kvlm
