#include "kv/kv_chunks.h"

#include <algorithm>
#include <cmath>

namespace kvlm {

std::vector<int32_t> kv_chunk_prompt(std::span<const int32_t> prefix, std::span<const int32_t> chunk,
                                     int32_t block_size) {
  std::vector<int32_t> prompt(prefix.begin(), prefix.end());
  prompt.insert(prompt.end(), chunk.begin(), chunk.end());
  prompt.resize(prompt.size() / static_cast<size_t>(block_size) * static_cast<size_t>(block_size));
  // Nothing of the chunk in a whole block: nothing of it can be reused.
  if (prompt.size() <= prefix.size()) prompt.clear();
  return prompt;
}

int32_t BlendPlan::num_cached_not_recomputed() const {
  int32_t n = 0;
  for (size_t i = 0; i < reused.size(); ++i) n += reused[i] == 1 && !compute[i];
  return n;
}

void select_recompute(BlendPlan& plan, double share) {
  std::vector<int32_t> reused;  // offsets into the plan
  for (size_t i = 0; i < plan.reused.size(); ++i)
    if (plan.reused[i]) reused.push_back(static_cast<int32_t>(i));
  const double clamped = std::clamp(share, 0.0, 1.0);
  const auto n = static_cast<size_t>(std::ceil(clamped * static_cast<double>(reused.size()) - 1e-9));
  // Largest deviation first; equal deviations in position order, so the
  // choice depends on the values alone.
  std::stable_sort(reused.begin(), reused.end(), [&](int32_t a, int32_t b) {
    return plan.deviation[static_cast<size_t>(a)] > plan.deviation[static_cast<size_t>(b)];
  });
  for (size_t k = 0; k < n && k < reused.size(); ++k) plan.compute[static_cast<size_t>(reused[k])] = 1;
  plan.num_recomputed = static_cast<int32_t>(std::min(n, reused.size()));
}

}  // namespace kvlm
