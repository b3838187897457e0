#include "model/lora_apply.h"

#include <algorithm>

#include "common/assert.h"

namespace kvlm {
namespace {

// Rows r0, r0 + 1, ...: the group reads and writes its rows in place.
bool contiguous(std::span<const int32_t> rows) {
  return rows.back() - rows.front() + 1 == static_cast<int32_t>(rows.size());
}

}  // namespace

void apply_lora(const Backend& backend, std::span<const LoraRows> groups, int32_t layer, LoraTarget target,
                const float* x, int64_t in, float* y, int64_t out, LoraScratch& s) {
  for (const LoraRows& g : groups) {
    if (g.rows.empty()) continue;
    const LoraPair* p = g.adapter->pair(layer, target);
    if (!p) continue;
    KVLM_ASSERT(p->a.cols == in && p->b.rows == out, "adapter pair matches the base matrix");
    const auto n = static_cast<int64_t>(g.rows.size());
    const int64_t rank = p->a.rows;
    const bool in_place = contiguous(g.rows);
    const float* xs = x + static_cast<int64_t>(g.rows.front()) * in;
    if (!in_place) {
      s.x.resize(static_cast<size_t>(n * in));
      for (int64_t i = 0; i < n; ++i)
        std::copy_n(x + static_cast<int64_t>(g.rows[i]) * in, in, s.x.data() + i * in);
      xs = s.x.data();
    }
    s.mid.resize(static_cast<size_t>(n * rank));
    s.delta.resize(static_cast<size_t>(n * out));
    backend.matmul(p->a, xs, n, s.mid.data());          // [n, rank]
    backend.scale_inplace(s.mid.data(), n * rank, p->scale);
    backend.matmul(p->b, s.mid.data(), n, s.delta.data());  // [n, out]
    if (in_place) {
      backend.add_inplace(y + static_cast<int64_t>(g.rows.front()) * out, s.delta.data(), n * out);
      continue;
    }
    for (int64_t i = 0; i < n; ++i)
      backend.add_inplace(y + static_cast<int64_t>(g.rows[i]) * out, s.delta.data() + i * out, out);
  }
}

}  // namespace kvlm
