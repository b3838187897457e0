// What per-head KV selection would buy (kvlm bench kv --head-analysis):
// today one block table serves every layer and KV head, so a policy keeps
// the same tokens for all of them, while H2O and TOVA as published choose per
// head, and PyramidKV per layer. From the attention of a full-cache pass (per
// layer and KV head), at eviction points every 16 tokens, this compares the
// future attention each granularity keeps with B tokens per unit: one set
// for everything, one per KV head (for all layers), one per layer (for all
// its heads), one per layer and head; chosen by the oracle's signal (the next
// `horizon` queries' attention) and by TOVA's (the current query's). Static:
// each point starts from the full cache, so it bounds what the layouts can
// differ by, not a run.
#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "apps/bench_kv.h"
#include "common/error.h"
#include "runner/model_runner.h"

namespace kvlm::apps {
namespace {

constexpr int kNumGranularities = 4;  // shared, per KV head, per layer, per layer and head


// The attention of the chunk's queries per layer and KV head:
// [layer][n][num_kv][n].
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

// Units are (layer, KV head) pairs, unit = layer * num_kv + head. A
// granularity maps each unit to the group that shares one selection.
int32_t group_of(int granularity, int32_t unit, int32_t num_kv) {
  switch (granularity) {
    case 0: return 0;                 // one set for all
    case 1: return unit % num_kv;     // per KV head, across layers
    case 2: return unit / num_kv;     // per layer, across heads
    default: return unit;             // per layer and head
  }
}

// The future attention each granularity keeps when each group takes the
// top `budget` keys by the sum of its units' `signal`; out[g] += the mass
// lost as a fraction of `total`.
void add_losses(const std::vector<std::vector<float>>& fut, const std::vector<std::vector<double>>& signal,
                int32_t num_kv, int32_t t, int32_t budget, double total, double* out) {
  const auto num_units = static_cast<int32_t>(fut.size());
  for (int granularity = 0; granularity < kNumGranularities; ++granularity) {
    std::vector<std::vector<double>> group_signal;
    for (int32_t u = 0; u < num_units; ++u) {
      const auto g = static_cast<size_t>(group_of(granularity, u, num_kv));
      if (group_signal.size() <= g) group_signal.resize(g + 1, std::vector<double>(static_cast<size_t>(t + 1), 0.0));
      for (int32_t k = 0; k <= t; ++k) group_signal[g][k] += signal[u][k];
    }
    std::vector<std::vector<int32_t>> keep;
    for (const auto& gs : group_signal) keep.push_back(top_keys(gs, t, budget));
    double kept = 0;
    for (int32_t u = 0; u < num_units; ++u)
      for (int32_t k : keep[static_cast<size_t>(group_of(granularity, u, num_kv))]) kept += fut[u][k];
    out[granularity] += 1 - kept / total;
  }
}

void add_point(const std::vector<float>& att, int32_t n, int32_t num_layers, int32_t num_kv, int32_t t,
               int32_t horizon, KvHeadAnalysis& a) {
  const int32_t num_units = num_layers * num_kv;
  auto at = [&](int32_t unit, int32_t q, int32_t k) {
    const int32_t l = unit / num_kv, h = unit % num_kv;
    return att[((static_cast<size_t>(l) * n + q) * num_kv + h) * static_cast<size_t>(n) + k];
  };
  std::vector<std::vector<float>> fut(static_cast<size_t>(num_units), std::vector<float>(static_cast<size_t>(t + 1), 0.f));
  std::vector<std::vector<double>> oracle(static_cast<size_t>(num_units)), current(static_cast<size_t>(num_units));
  double total = 0;
  for (int32_t u = 0; u < num_units; ++u) {
    for (int32_t q = t + 1; q < std::min(n, t + 1 + horizon); ++q)
      for (int32_t k = 0; k <= t; ++k) fut[u][k] += at(u, q, k);
    oracle[u].assign(fut[u].begin(), fut[u].end());
    current[u].resize(static_cast<size_t>(t + 1));
    for (int32_t k = 0; k <= t; ++k) current[u][k] = at(u, t, k);
    total += std::accumulate(fut[u].begin(), fut[u].end(), 0.0);
  }
  if (total <= 0) return;
  for (size_t b = 0; b < a.budgets.size(); ++b) {
    add_losses(fut, oracle, num_kv, t, a.budgets[b], total, a.lost[b].data());
    add_losses(fut, current, num_kv, t, a.budgets[b], total, a.lost[b].data() + kNumGranularities);
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
  runner.set_attention_per_layer(true);
  KvHeadAnalysis a;
  a.budgets = budgets;
  a.horizon = horizon;
  a.num_kv_heads = num_kv;
  a.num_layers = model.config().num_layers;
  a.lost.assign(budgets.size(), {});
  const int32_t smallest = *std::min_element(budgets.begin(), budgets.end());
  for (int32_t c = 0; c < num_chunks && static_cast<size_t>(c + 1) * n_ctx <= tokens.size(); ++c) {
    std::vector<int32_t> chunk(tokens.begin() + static_cast<ptrdiff_t>(c) * n_ctx,
                               tokens.begin() + static_cast<ptrdiff_t>(c + 1) * n_ctx);
    if (bos) chunk[0] = *bos;
    const std::vector<float> att = chunk_attention(runner, chunk, c, num_blocks);
    // Points where every budget has something to drop and queries follow.
    for (int32_t t = (smallest / kBlock + 1) * kBlock; t < n_ctx - 1; t += kBlock)
      add_point(att, n_ctx, a.num_layers, num_kv, t, horizon, a);
  }
  if (a.num_points == 0) throw_error(ErrorCode::kInvalidArgument, "no chunk of {} tokens to analyse", n_ctx);
  for (auto& row : a.lost)
    for (double& x : row) x /= static_cast<double>(a.num_points);
  return a;
}

std::string format_kv_head_analysis(const KvHeadAnalysis& a) {
  std::string out = fmt::format(
      "future attention lost with B tokens kept per unit (next {} queries; {} eviction points; {} layers x {} KV "
      "heads):\n{:>7} {:>8}  {:>8} {:>8} {:>8} {:>8}   {:>8} {:>8} {:>8} {:>8}\n",
      a.horizon, a.num_points, a.num_layers, a.num_kv_heads, "", "", "oracle:", "", "", "", "current", "query's",
      "(TOVA):", "");
  out += fmt::format("{:>7}  {:>8} {:>8} {:>8} {:>8}   {:>8} {:>8} {:>8} {:>8}\n", "budget", "shared", "/head",
                     "/layer", "/l+head", "shared", "/head", "/layer", "/l+head");
  for (size_t b = 0; b < a.budgets.size(); ++b) {
    out += fmt::format("{:>7} ", a.budgets[b]);
    for (size_t i = 0; i < a.lost[b].size(); ++i) out += fmt::format("{}{:>7.2f}%", i == 4 ? "    " : " ", 100 * a.lost[b][i]);
    out += "\n";
  }
  return out;
}

}  // namespace kvlm::apps
