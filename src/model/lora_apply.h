// A step's LoRA adapters applied beside the base's matmuls: for each adapter
// in the step, its rows are gathered, shrunk by A to its rank, scaled and
// expanded by B, and added to the base's output rows (Punica's grouped
// shrink/expand, on the backend's own matmul). Rows of different adapters
// and of the base run in one step; each row's result depends only on that
// row and its adapter, so a sequence gets the same output alone or batched.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "model/forward_batch.h"
#include "model/lora.h"

namespace kvlm {

// Buffers reused across calls (grown on demand).
struct LoraScratch {
  std::vector<float> x;      // [rows, in] the group's gathered inputs
  std::vector<float> mid;    // [rows, rank]
  std::vector<float> delta;  // [rows, out]
};

// y[r] += scale * B (A x[r]) for every row r of every group whose adapter
// adapts (layer, target).  x: [T, in]; y: [T, out].
void apply_lora(const Backend& backend, std::span<const LoraRows> groups, int32_t layer, LoraTarget target,
                const float* x, int64_t in, float* y, int64_t out, LoraScratch& s);

}  // namespace kvlm
