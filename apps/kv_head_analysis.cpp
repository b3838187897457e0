// What per-head KV selection would buy (kvlm bench kv --head-analysis):
// today one block table serves every KV head, so a policy keeps the same
// tokens for all of them, while H2O and TOVA as published choose per head.
// From the attention of a full-cache pass, at eviction points every 16
// tokens, this compares the future attention each selection keeps: the same
// budget of B tokens chosen once for all KV heads (shared) or for each head
// (per head), by the oracle's signal (the next `horizon` queries' attention)
// and by TOVA's (the current query's). Static: each point starts from the
// full cache, so it bounds what the layouts can differ by, not a run.
#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "apps/bench_kv.h"
#include "common/error.h"
#include "runner/model_runner.h"

namespace kvlm::apps {
namespace {

// The attention of the chunk's queries per KV head: [n][num_kv][n].
std::vector<float> chunk_attention(ModelRunner& runner, std::span<const int32_t> tokens, int32_t chunk,
                                   int32_t num_blocks) {
  SchedulerOutput out;
  ScheduledSeq s;
  s.id = RequestId(chunk + 1);
  s.new_tokens.assign(tokens.begin(), tokens.end());
  s.sample = true;
  s.collect_attention = true;
  BlockTableChange table;
  for (int32_t b = 0; b < num_blocks; ++b) table.append.push_back(b);
  s.table_changes = {table};
  out.seqs.push_back(std::move(s));
  if (chunk > 0) out.released_tables = {RequestId(chunk)};
  out.num_tokens = static_cast<int32_t>(tokens.size());
  runner.execute(out);
  const std::span<const float> raw = runner.attention_per_kv_head(0);
  return {raw.begin(), raw.end()};
}

// Sum over heads of the mass `keep` (per head, or one set for all) holds of
// each head's future attention fut[h][k], k <= t.
double kept_mass(const std::vector<std::vector<float>>& fut, const std::vector<std::vector<int32_t>>& keep) {
  double kept = 0;
  for (size_t h = 0; h < fut.size(); ++h)
    for (int32_t k : keep[keep.size() == 1 ? 0 : h]) kept += fut[h][static_cast<size_t>(k)];
  return kept;
}

// The `budget` keys of the highest score among score[0 .. t].
std::vector<int32_t> top_keys(const std::vector<double>& score, int32_t t, int32_t budget) {
  std::vector<int32_t> ids(static_cast<size_t>(t + 1));
  std::iota(ids.begin(), ids.end(), 0);
  if (budget < t + 1) {
    std::nth_element(ids.begin(), ids.begin() + budget, ids.end(),
                     [&](int32_t a, int32_t b) { return score[static_cast<size_t>(a)] > score[static_cast<size_t>(b)]; });
    ids.resize(static_cast<size_t>(budget));
  }
  return ids;
}

// Selections by `signal` ([head][key]): one shared set and one per head.
void select(const std::vector<std::vector<double>>& signal, int32_t t, int32_t budget,
            std::vector<std::vector<int32_t>>& shared, std::vector<std::vector<int32_t>>& per_head) {
  std::vector<double> sum(signal[0].size(), 0.0);
  per_head.clear();
  for (const auto& h : signal) {
    for (size_t k = 0; k < h.size(); ++k) sum[k] += h[k];
    per_head.push_back(top_keys(h, t, budget));
  }
  shared = {top_keys(sum, t, budget)};
}

void add_point(const std::vector<float>& att, int32_t n, int32_t num_kv, int32_t t, int32_t horizon,
               KvHeadAnalysis& a) {
  auto at = [&](int32_t q, int32_t h, int32_t k) {
    return att[(static_cast<size_t>(q) * num_kv + h) * static_cast<size_t>(n) + k];
  };
  std::vector<std::vector<float>> fut(static_cast<size_t>(num_kv), std::vector<float>(static_cast<size_t>(t + 1), 0.f));
  std::vector<std::vector<double>> oracle(static_cast<size_t>(num_kv)), current(static_cast<size_t>(num_kv));
  double total = 0;
  for (int32_t h = 0; h < num_kv; ++h) {
    for (int32_t q = t + 1; q < std::min(n, t + 1 + horizon); ++q)
      for (int32_t k = 0; k <= t; ++k) fut[h][k] += at(q, h, k);
    oracle[h].assign(fut[h].begin(), fut[h].end());
    current[h].resize(static_cast<size_t>(t + 1));
    for (int32_t k = 0; k <= t; ++k) current[h][k] = at(t, h, k);
    total += std::accumulate(fut[h].begin(), fut[h].end(), 0.0);
  }
  if (total <= 0) return;
  for (size_t b = 0; b < a.budgets.size(); ++b) {
    std::vector<std::vector<int32_t>> shared, per_head;
    select(oracle, t, a.budgets[b], shared, per_head);
    a.lost[b][0] += 1 - kept_mass(fut, shared) / total;
    a.lost[b][1] += 1 - kept_mass(fut, per_head) / total;
    select(current, t, a.budgets[b], shared, per_head);
    a.lost[b][2] += 1 - kept_mass(fut, shared) / total;
    a.lost[b][3] += 1 - kept_mass(fut, per_head) / total;
  }
  ++a.num_points;
}

}  // namespace

KvHeadAnalysis kv_head_analysis(const Model& model, DType kv_dtype, const std::vector<int32_t>& tokens, int32_t n_ctx,
                                int32_t num_chunks, std::optional<int32_t> bos, const std::vector<int32_t>& budgets,
                                int32_t horizon) {
  constexpr int32_t kBlock = 16;
  const int32_t num_blocks = (n_ctx + kBlock - 1) / kBlock;
  const int32_t num_kv = model.config().num_kv_heads;
  ModelRunner runner(model, kv_dtype, kBlock, num_blocks);
  KvHeadAnalysis a;
  a.budgets = budgets;
  a.horizon = horizon;
  a.num_kv_heads = num_kv;
  a.lost.assign(budgets.size(), {0, 0, 0, 0});
  const int32_t smallest = *std::min_element(budgets.begin(), budgets.end());
  for (int32_t c = 0; c < num_chunks && static_cast<size_t>(c + 1) * n_ctx <= tokens.size(); ++c) {
    std::vector<int32_t> chunk(tokens.begin() + static_cast<ptrdiff_t>(c) * n_ctx,
                               tokens.begin() + static_cast<ptrdiff_t>(c + 1) * n_ctx);
    if (bos) chunk[0] = *bos;
    const std::vector<float> att = chunk_attention(runner, chunk, c, num_blocks);
    // Points where every budget has something to drop and queries follow.
    for (int32_t t = (smallest / kBlock + 1) * kBlock; t < n_ctx - 1; t += kBlock)
      add_point(att, n_ctx, num_kv, t, horizon, a);
  }
  if (a.num_points == 0) throw_error(ErrorCode::kInvalidArgument, "no chunk of {} tokens to analyse", n_ctx);
  for (auto& row : a.lost)
    for (double& x : row) x /= static_cast<double>(a.num_points);
  return a;
}

std::string format_kv_head_analysis(const KvHeadAnalysis& a) {
  std::string out = fmt::format(
      "future attention lost (next {} queries; {} eviction points, {} KV heads, layers summed):\n"
      "{:>7} {:>14} {:>14} {:>14} {:>14}\n",
      a.horizon, a.num_points, a.num_kv_heads, "budget", "oracle shared", "oracle/head", "current shared",
      "current/head");
  for (size_t b = 0; b < a.budgets.size(); ++b)
    out += fmt::format("{:>7} {:>13.2f}% {:>13.2f}% {:>13.2f}% {:>13.2f}%\n", a.budgets[b], 100 * a.lost[b][0],
                       100 * a.lost[b][1], 100 * a.lost[b][2], 100 * a.lost[b][3]);
  return out;
}

}  // namespace kvlm::apps
