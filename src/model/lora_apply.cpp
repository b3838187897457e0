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
  // Sizes first: the buffers must not move once the jobs point into them.
  size_t gathered = 0, mid = 0, delta = 0;
  std::vector<LoraShare>& shares = s.shares;
  shares.clear();
  for (const LoraRows& g : groups) {
    const LoraPair* p = g.rows.empty() ? nullptr : g.adapter->pair(layer, target);
    if (!p) continue;
    KVLM_ASSERT(p->a.cols == in && p->b.rows == out, "adapter pair matches the base matrix");
    const size_t n = g.rows.size();
    shares.push_back({p, g.rows, nullptr, mid, delta});
    if (!contiguous(g.rows)) gathered += n * static_cast<size_t>(in);
    mid += n * static_cast<size_t>(p->a.rows);
    delta += n * static_cast<size_t>(out);
  }
  if (shares.empty()) return;
  s.x.resize(gathered);
  s.mid.resize(mid);
  s.delta.resize(delta);
  size_t at = 0;
  for (LoraShare& sh : shares) {
    if (contiguous(sh.rows)) {
      sh.x = x + static_cast<int64_t>(sh.rows.front()) * in;
      continue;
    }
    float* dst = s.x.data() + at;
    for (size_t i = 0; i < sh.rows.size(); ++i) std::copy_n(x + static_cast<int64_t>(sh.rows[i]) * in, in, dst + i * in);
    sh.x = dst;
    at += sh.rows.size() * static_cast<size_t>(in);
  }
  // Shrink every adapter's rows to its rank, then expand: two grouped calls.
  std::vector<GroupedMatmulJob>& jobs = s.jobs;
  jobs.clear();
  for (const LoraShare& sh : shares)
    jobs.push_back({&sh.pair->a, sh.x, static_cast<int64_t>(sh.rows.size()), s.mid.data() + sh.mid});
  backend.matmul_grouped(jobs);
  jobs.clear();
  for (const LoraShare& sh : shares) {
    const auto n = static_cast<int64_t>(sh.rows.size());
    backend.scale_inplace(s.mid.data() + sh.mid, n * sh.pair->a.rows, sh.pair->scale);
    jobs.push_back({&sh.pair->b, s.mid.data() + sh.mid, n, s.delta.data() + sh.delta});
  }
  backend.matmul_grouped(jobs);
  for (const LoraShare& sh : shares) {
    const float* d = s.delta.data() + sh.delta;
    if (contiguous(sh.rows)) {
      backend.add_inplace(y + static_cast<int64_t>(sh.rows.front()) * out, d,
                          static_cast<int64_t>(sh.rows.size()) * out);
      continue;
    }
    for (size_t i = 0; i < sh.rows.size(); ++i)
      backend.add_inplace(y + static_cast<int64_t>(sh.rows[i]) * out, d + i * out, out);
  }
}

}  // namespace kvlm
