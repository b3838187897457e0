#include "model/lora.h"

#include <cstring>

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

uint64_t lora_extra_key(const LoraAdapter& adapter, uint64_t salt_key) {
  // Seeded by the identity, so two adapters never share a key, and the salt
  // rides inside, so salted requests of one adapter stay apart too.
  return hash128(&salt_key, sizeof(salt_key), adapter.identity).lo | 1;
}

}  // namespace kvlm
