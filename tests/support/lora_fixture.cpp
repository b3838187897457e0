#include "support/lora_fixture.h"

#include <cmath>
#include <random>

namespace kvlm::test {
namespace {

// (in, out) of target t in model m.
std::pair<int64_t, int64_t> target_shape(const ModelConfig& c, LoraTarget t) {
  switch (t) {
    case LoraTarget::kQ: return {c.dim, c.q_dim()};
    case LoraTarget::kK:
    case LoraTarget::kV: return {c.dim, c.kv_dim()};
    case LoraTarget::kQkv: return {c.dim, c.q_dim() + 2 * c.kv_dim()};
    case LoraTarget::kOut: return {c.q_dim(), c.dim};
    case LoraTarget::kGate:
    case LoraTarget::kUp: return {c.dim, c.ffn_dim};
    case LoraTarget::kDown: return {c.ffn_dim, c.dim};
  }
  return {0, 0};
}

constexpr LoraTarget kAttention[] = {LoraTarget::kQ, LoraTarget::kK, LoraTarget::kV, LoraTarget::kOut};
constexpr LoraTarget kAll[] = {LoraTarget::kQ,    LoraTarget::kK,  LoraTarget::kV,   LoraTarget::kOut,
                               LoraTarget::kGate, LoraTarget::kUp, LoraTarget::kDown};

}  // namespace

std::span<const LoraTarget> llama_attention_targets() { return kAttention; }
std::span<const LoraTarget> llama_all_targets() { return kAll; }

std::shared_ptr<const LoraAdapter> random_lora(const Model& model, int32_t rank, std::span<const LoraTarget> targets,
                                               uint64_t seed, float scale, float b_range) {
  const ModelConfig& c = model.config();
  auto out = std::make_shared<LoraAdapter>();
  out->source = "random_lora(seed " + std::to_string(seed) + ")";
  out->max_rank = rank;
  out->layers.resize(static_cast<size_t>(c.num_layers));
  std::mt19937_64 rng(seed);
  for (int32_t l = 0; l < c.num_layers; ++l)
    for (LoraTarget t : targets) {
      const auto [in, num_out] = target_shape(c, t);
      const float a_range = 1.0f / std::sqrt(static_cast<float>(in));
      std::uniform_real_distribution<float> ua(-a_range, a_range), ub(-b_range, b_range);
      std::vector<float> a(static_cast<size_t>(rank * in)), b(static_cast<size_t>(num_out * rank));
      for (float& v : a) v = ua(rng);
      for (float& v : b) v = ub(rng);
      LoraPair p;
      p.scale = scale;
      p.a = keep_lora_matrix(*out, a, rank, in, model.backend());
      p.b = keep_lora_matrix(*out, b, num_out, rank, model.backend());
      out->layers[static_cast<size_t>(l)][static_cast<size_t>(t)] = p;
    }
  const uint64_t key[3] = {seed, static_cast<uint64_t>(rank), static_cast<uint64_t>(targets.size())};
  out->identity = hash128(key, sizeof(key), hash128(&scale, sizeof(scale)));
  return out;
}

}  // namespace kvlm::test
