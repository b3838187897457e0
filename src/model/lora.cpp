#include "model/lora.h"

#include <cstring>

#include "backend/backend.h"
#include "common/assert.h"

namespace kvlm {
namespace {

constexpr std::string_view kTargetNames[kNumLoraTargets] = {
    "attn_q", "attn_k", "attn_v", "attn_qkv", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};

}  // namespace

std::string_view lora_target_gguf_name(LoraTarget t) { return kTargetNames[static_cast<size_t>(t)]; }

std::optional<LoraTarget> lora_target_from_gguf_name(std::string_view name) {
  for (size_t i = 0; i < kNumLoraTargets; ++i)
    if (kTargetNames[i] == name) return static_cast<LoraTarget>(i);
  return std::nullopt;
}

std::vector<LoraTarget> LoraAdapter::targets() const {
  std::vector<LoraTarget> out;
  for (size_t t = 0; t < kNumLoraTargets; ++t)
    for (const auto& layer : layers)
      if (layer[t]) {
        out.push_back(static_cast<LoraTarget>(t));
        break;
      }
  return out;
}

namespace {

// The stacked pair of several adapters' pairs of one matrix (stack_loras).
LoraPair stack_pairs(const std::vector<const LoraPair*>& parts, LoraAdapter& out, const Backend& backend) {
  int64_t rank = 0;
  for (const LoraPair* p : parts) rank += p->a.rows;
  const int64_t in = parts[0]->a.cols, num_out = parts[0]->b.rows;
  std::vector<float> a(static_cast<size_t>(rank * in)), b(static_cast<size_t>(num_out * rank));
  int64_t r0 = 0;
  for (const LoraPair* p : parts) {
    KVLM_ASSERT(p->a.cols == in && p->b.rows == num_out, "stacked adapters adapt matrices of one shape");
    const auto* pa = static_cast<const float*>(p->a.data);
    const auto* pb = static_cast<const float*>(p->b.data);
    std::copy_n(pa, p->a.rows * in, a.data() + r0 * in);
    for (int64_t o = 0; o < num_out; ++o)
      for (int64_t k = 0; k < p->a.rows; ++k) b[o * rank + r0 + k] = p->scale * pb[o * p->a.rows + k];
    r0 += p->a.rows;
  }
  out.max_rank = std::max(out.max_rank, static_cast<int32_t>(rank));
  out.num_bytes += (a.size() + b.size()) * sizeof(float);
  LoraPair pair;
  pair.a = backend.prepare_matrix(WeightMatrix{a.data(), DType::kF32, rank, in});
  pair.b = backend.prepare_matrix(WeightMatrix{b.data(), DType::kF32, num_out, rank});
  out.storage.push_back(std::move(a));  // moving a vector keeps its buffer
  out.storage.push_back(std::move(b));
  return pair;
}

}  // namespace

std::shared_ptr<const LoraAdapter> stack_loras(std::span<const std::shared_ptr<const LoraAdapter>> adapters,
                                               const Backend& backend) {
  KVLM_ASSERT(!adapters.empty(), "at least one adapter to stack");
  if (adapters.size() == 1) return adapters[0];
  auto out = std::make_shared<LoraAdapter>();
  out->layers.resize(adapters[0]->layers.size());
  for (const auto& a : adapters) {
    KVLM_ASSERT(a->layers.size() == out->layers.size(), "stacked adapters of one base");
    out->source += (out->source.empty() ? "" : " + ") + a->source;
    out->identity = hash128(&a->identity, sizeof(a->identity), out->identity);
  }
  for (size_t l = 0; l < out->layers.size(); ++l)
    for (size_t t = 0; t < kNumLoraTargets; ++t) {
      std::vector<const LoraPair*> parts;
      for (const auto& a : adapters)
        if (a->layers[l][t]) parts.push_back(&*a->layers[l][t]);
      if (!parts.empty()) out->layers[l][t] = stack_pairs(parts, *out, backend);
    }
  return out;
}

}  // namespace kvlm
