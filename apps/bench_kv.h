// kvlm bench kv (cmd_bench_kv.cpp) and its plot (kv_plot.cpp).
#pragma once

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
  std::vector<std::pair<double, double>> points;  // (budget tokens or KV KiB, perplexity)
};

// A PNG of perplexity against KV budget, one line per policy and the
// full-cache perplexity as a dashed line, drawn by gnuplot (Debian
// gnuplot-nox). Throws Error(kUnavailable) if gnuplot is missing or fails.
void write_kv_plot(const std::string& png_path, const std::vector<KvPlotSeries>& series, double full_perplexity,
                   const std::string& title, const std::string& x_label);

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

}  // namespace kvlm::apps
