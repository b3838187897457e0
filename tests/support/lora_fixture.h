// LoRA adapters of random weights built in memory for a loaded model, for
// tests of the forward pass and the engine that need no adapter file.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "model/lora.h"
#include "model/model.h"

namespace kvlm::test {

// Rank `rank` pairs on every layer's `targets` of `model`: A ~ U(-1/sqrt(in),
// 1/sqrt(in)), B ~ U(-b_range, b_range) from `seed`, scale `scale`; the
// identity a digest of the seed, rank, scale and targets (equal arguments:
// equal adapters).
std::shared_ptr<const LoraAdapter> random_lora(const Model& model, int32_t rank, std::span<const LoraTarget> targets,
                                               uint64_t seed, float scale = 0.5f, float b_range = 0.05f);

// The targets of a llama-style model: attention only, or attention and MLP.
std::span<const LoraTarget> llama_attention_targets();
std::span<const LoraTarget> llama_all_targets();

}  // namespace kvlm::test
