// kvlm bench kv (cmd_bench_kv.cpp) and its plot (kv_plot.cpp).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backend/dtype.h"

namespace kvlm {
class Model;
}

namespace kvlm::apps {

int bench_kv(int argc, char** argv);

struct KvPlotSeries {
  std::string name;                              // the policy
  std::vector<std::pair<double, double>> points;  // (x, y) as KvPlotAxes names them
  int color = 0;  // 1..8: gnuplot's line colour (0: the series' own in turn)
  int dash = 1;   // gnuplot dash type (1: solid)
};

// A PNG of one line per series (perplexity against KV budget, or the
// predictions' distance from the reference against KV bytes) and, if given,
// a dashed reference line (the full cache's perplexity), drawn by gnuplot
// (Debian gnuplot-nox). Throws Error(kUnavailable) if gnuplot is missing or fails.
struct KvPlotAxes {
  std::string title, x_label, y_label;
  std::optional<double> reference;  // drawn as "full cache"
};
void write_kv_plot(const std::string& png_path, const std::vector<KvPlotSeries>& series, const KvPlotAxes& axes);

// Mean attention mass (fraction, summed over the named slots) of the queries
// in the second half of each chunk: on the first token, the first 4, and the
// newest recent_sizes[i] tokens (the query itself included).
struct AttentionProfile {
  int64_t num_queries = 0;
  double first = 0, first4 = 0;
  std::vector<int32_t> recent_sizes = {16, 32, 64, 128, 256};
  std::vector<double> recent = std::vector<double>(5, 0.0);
};
AttentionProfile attention_profile(const Model& model, DType kv_dtype, const std::vector<int32_t>& tokens,
                                   int32_t n_ctx, int32_t num_chunks, std::optional<int32_t> bos);
std::string format_attention_profile(const AttentionProfile& p);

// Per-head against shared KV selection (kv_head_analysis.cpp): the mean
// fraction of the next `horizon` queries' attention (to the keys present at
// an eviction point) that B kept tokens per unit miss, for B in budgets.
// lost[b][0..3]: chosen by the oracle's signal once for everything, per KV
// head, per layer, per layer and head; [4..7]: the same by the current
// query's attention (TOVA's).
struct KvHeadAnalysis {
  std::vector<int32_t> budgets;
  std::vector<std::array<double, 8>> lost;  // [budget][selection]
  int64_t num_points = 0;
  int32_t horizon = 0, num_kv_heads = 0, num_layers = 0;
};
KvHeadAnalysis kv_head_analysis(const Model& model, DType kv_dtype, const std::vector<int32_t>& tokens, int32_t n_ctx,
                                int32_t num_chunks, std::optional<int32_t> bos, const std::vector<int32_t>& budgets,
                                int32_t horizon);
std::string format_kv_head_analysis(const KvHeadAnalysis& a);

}  // namespace kvlm::apps
