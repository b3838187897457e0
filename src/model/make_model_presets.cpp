// The presets of `kvlm make-model`: the published configs (config.json) of
// the models, as llama.cpp's converter turns them into GGUF metadata.
#include "model/make_model.h"

namespace kvlm {
namespace {

struct Preset {
  const char* key;
  ModelShape shape;
};

ModelShape dense(std::string arch, std::string name, int32_t dim, int32_t layers, int32_t heads, int32_t kv_heads,
                 int32_t ffn, int32_t ctx, float rope_base, float eps, bool tied) {
  ModelShape s;
  s.arch = std::move(arch);
  s.name = std::move(name);
  s.dim = dim;
  s.num_layers = layers;
  s.num_heads = heads;
  s.num_kv_heads = kv_heads;
  s.ffn_dim = ffn;
  s.context_length = ctx;
  s.rope_base = rope_base;
  s.norm_eps = eps;
  s.tied_embeddings = tied;
  return s;
}

ModelShape with_llama3_rope(ModelShape s, float factor) {
  s.rope_scaling.type = "llama3";
  s.rope_scaling.factor = factor;
  s.rope_scaling.low_freq_factor = 1.0f;
  s.rope_scaling.high_freq_factor = 4.0f;
  s.rope_scaling.original_context = 8192;
  return s;
}

ModelShape with_experts(ModelShape s, int32_t experts, int32_t used, int32_t expert_ffn, int32_t shared_ffn) {
  s.num_experts = experts;
  s.num_experts_used = used;
  s.expert_ffn_dim = expert_ffn;
  s.shared_expert_ffn_dim = shared_ffn;
  return s;
}

ModelShape with_head_dim(ModelShape s, int32_t head_dim) {
  s.head_dim = head_dim;
  return s;
}

ModelShape phi3(std::string name, int32_t ctx, int32_t window, int32_t original_ctx) {
  ModelShape s = dense("phi3", std::move(name), 3072, 32, 32, 32, 8192, ctx, 10000.0f, 1e-5f, false);
  s.sliding_window = window;
  s.rope_scaling.original_context = original_ctx;
  if (ctx > original_ctx) s.rope_scaling.type = "longrope";
  return s;
}

const std::vector<Preset>& presets() {
  static const std::vector<Preset> p = {
      {"tinyllama-1.1b", dense("llama", "TinyLlama-1.1B (random)", 2048, 22, 32, 4, 5632, 2048, 10000.0f, 1e-5f, false)},
      {"qwen2.5-0.5b", dense("qwen2", "Qwen2.5-0.5B (random)", 896, 24, 14, 2, 4864, 32768, 1e6f, 1e-6f, true)},
      {"llama-3.2-1b", with_llama3_rope(dense("llama", "Llama-3.2-1B (random)", 2048, 16, 32, 8, 8192, 131072,
                                              500000.0f, 1e-5f, true), 32.0f)},
      {"llama-3-8b", dense("llama", "Meta-Llama-3-8B (random)", 4096, 32, 32, 8, 14336, 8192, 500000.0f, 1e-5f, false)},
      {"llama-3.1-8b", with_llama3_rope(dense("llama", "Llama-3.1-8B (random)", 4096, 32, 32, 8, 14336, 131072,
                                              500000.0f, 1e-5f, false), 8.0f)},
      {"mistral-7b", dense("llama", "Mistral-7B-v0.3 (random)", 4096, 32, 32, 8, 14336, 32768, 1e6f, 1e-5f, false)},
      {"qwen2.5-7b", dense("qwen2", "Qwen2.5-7B (random)", 3584, 28, 28, 4, 18944, 32768, 1e6f, 1e-6f, false)},
      {"mixtral-8x7b", with_experts(dense("llama", "Mixtral-8x7B-v0.1 (random)", 4096, 32, 32, 8, 14336, 32768,
                                          1e6f, 1e-5f, false), 8, 2, 14336, 0)},
      {"qwen1.5-moe-a2.7b", with_experts(dense("qwen2moe", "Qwen1.5-MoE-A2.7B (random)", 2048, 24, 16, 16, 5632, 8192,
                                               1e6f, 1e-6f, false), 60, 4, 1408, 5632)},
      {"qwen3-0.6b", with_head_dim(dense("qwen3", "Qwen3-0.6B (random)", 1024, 28, 16, 8, 3072, 40960, 1e6f, 1e-6f,
                                         true), 128)},
      {"qwen3-8b", with_head_dim(dense("qwen3", "Qwen3-8B (random)", 4096, 36, 32, 8, 12288, 40960, 1e6f, 1e-6f,
                                       false), 128)},
      {"qwen3-30b-a3b", with_experts(with_head_dim(dense("qwen3moe", "Qwen3-30B-A3B (random)", 2048, 48, 32, 4, 6144,
                                                         40960, 1e6f, 1e-6f, false), 128), 128, 8, 768, 0)},
      {"phi-3-mini-4k", phi3("Phi-3-mini-4k-instruct (random)", 4096, 2047, 4096)},
      {"phi-3.5-mini", phi3("Phi-3.5-mini-instruct (random; synthetic long-rope factors)", 131072, 262144, 4096)},
  };
  return p;
}

}  // namespace

std::optional<ModelShape> model_preset(std::string_view name) {
  for (const auto& p : presets())
    if (name == p.key) return p.shape;
  return std::nullopt;
}

const std::vector<std::string>& model_preset_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& p : presets()) v.emplace_back(p.key);
    return v;
  }();
  return names;
}

}  // namespace kvlm
