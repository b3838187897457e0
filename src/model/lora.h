// LoRA adapters on a loaded base model (docs/lora.md): each adapted matrix W
// of a layer gets y += scale * B (A x) beside the base's y = W x, for the
// rows of a step whose sequence uses the adapter. Adapters are applied at
// run time, never merged into the base, so one base serves many adapters
// and the base alone in one batch (model/lora_apply.h).
//
// Two file formats load into one LoraAdapter (model/lora_load.h): a PEFT
// folder (adapter_config.json + adapter_model.safetensors) and llama.cpp's
// GGUF LoRA (general.type = adapter, adapter.type = lora).
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/dtype.h"
#include "backend/weight_matrix.h"
#include "common/hash.h"

namespace kvlm {

class Backend;

// The base matrices an adapter can adapt, by their GGUF tensor names
// ("blk.N.<name>.weight"). kQkv is a fused q/k/v matrix (GPT-2's c_attn).
enum class LoraTarget : uint8_t { kQ, kK, kV, kQkv, kOut, kGate, kUp, kDown };
inline constexpr size_t kNumLoraTargets = 8;

// "attn_q", "attn_k", "attn_v", "attn_qkv", "attn_output", "ffn_gate",
// "ffn_up", "ffn_down": the GGUF name between "blk.N." and ".weight".
std::string_view lora_target_gguf_name(LoraTarget t);
std::optional<LoraTarget> lora_target_from_gguf_name(std::string_view name);

// One adapted matrix: delta y = scale * B (A x). A and B are of the
// adapter's dtype (F32, F16 or BF16) and were prepared by the backend that
// runs the base (Backend::prepare_matrix).
struct LoraPair {
  WeightMatrix a;      // [rank, in]
  WeightMatrix b;      // [out, rank]
  float scale = 1.0f;  // alpha / rank (rsLoRA: alpha / sqrt(rank)), times the user's scale
};

struct LoraAdapter {
  std::string source;   // the file or folder it was read from (messages)
  int32_t max_rank = 0;
  // A digest of every pair's tensors and scale (not the name or path): the
  // KV cache keeps blocks of different adapters apart by it, and an
  // identical adapter loaded again finds its blocks (kv/block_hash.h
  // adapter_extra_key).
  Hash128 identity;
  // [num_layers][target]: the pair adapting layer l's target, if any.
  std::vector<std::array<std::optional<LoraPair>, kNumLoraTargets>> layers;
  // The type A and B are held in: F32 (exact), or F16 / BF16 (half the
  // bytes a decode step reads per adapter).
  DType dtype = DType::kF32;
  // Owns the bytes the pairs' WeightMatrix views point into.
  std::vector<std::vector<uint8_t>> storage;

  const LoraPair* pair(int32_t layer, LoraTarget t) const {
    const auto& slot = layers[static_cast<size_t>(layer)][static_cast<size_t>(t)];
    return slot ? &*slot : nullptr;
  }
  // Bytes the adapter holds (its tensors as F32, and their packed copies).
  size_t num_bytes = 0;
  // Targets it adapts somewhere, in enum order ("attn_q", "ffn_down", ...).
  std::vector<LoraTarget> targets() const;
};

// A [rows, cols] matrix of `values` held by `adapter` in its dtype and
// prepared by `backend` (counted in num_bytes): how every pair is made.
WeightMatrix keep_lora_matrix(LoraAdapter& adapter, const std::vector<float>& values, int64_t rows, int64_t cols,
                              const Backend& backend);
// A pair's matrix back as F32 values (merging, stacking).
std::vector<float> lora_matrix_values(const WeightMatrix& m);

// One adapter that applies all of `adapters` at once (llama.cpp's several
// --lora): for each matrix, their pairs stacked along the rank (A = [A1; A2],
// B = [s1 B1, s2 B2], scale 1), equal in exact arithmetic to the sum of
// their shares. One adapter is returned as it is. Each must be of one base.
std::shared_ptr<const LoraAdapter> stack_loras(std::span<const std::shared_ptr<const LoraAdapter>> adapters,
                                               const Backend& backend);

}  // namespace kvlm
