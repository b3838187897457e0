// A step's LoRA adapters applied beside the base's matmuls: for each adapter
// in the step, its rows are gathered, shrunk by A to its rank, scaled and
// expanded by B, and added to the base's output rows (Punica's grouped
// shrink/expand: every adapter's shrink in one Backend::matmul_grouped, then
// every expand in another). Rows of different adapters
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

// One adapter's part of an apply_lora call: its pair, its rows, where its
// input rows are, and its offsets into LoraScratch::mid and ::delta.
struct LoraShare {
  const LoraPair* pair;
  std::span<const int32_t> rows;
  const float* x;     // [n, in]: the rows in place, or gathered in LoraScratch::x
  size_t mid, delta;  // [n, rank] and [n, out]
};

// Buffers reused across calls (grown on demand).
struct LoraScratch {
  std::vector<float> x;      // the groups' gathered inputs (rows not in one run), [rows, in] each
  std::vector<float> mid;    // each group's [rows, rank]
  std::vector<float> delta;  // each group's [rows, out]
  std::vector<LoraShare> shares;
  std::vector<GroupedMatmulJob> jobs;
};

// y[r] += scale * B (A x[r]) for every row r of every group whose adapter
// adapts (layer, target).  x: [T, in]; y: [T, out].
void apply_lora(const Backend& backend, std::span<const LoraRows> groups, int32_t layer, LoraTarget target,
                const float* x, int64_t in, float* y, int64_t out, LoraScratch& s);

}  // namespace kvlm
