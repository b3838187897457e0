// kvlm bench kv (cmd_bench_kv.cpp) and its plot (kv_plot.cpp).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace kvlm::apps {

int bench_kv(int argc, char** argv);

struct KvPlotSeries {
  std::string name;                              // the policy
  std::vector<std::pair<double, double>> points;  // (budget tokens, perplexity)
};

// A PNG of perplexity against KV budget, one line per policy and the
// full-cache perplexity as a dashed line, drawn by gnuplot (Debian
// gnuplot-nox). Throws Error(kUnavailable) if gnuplot is missing or fails.
void write_kv_plot(const std::string& png_path, const std::vector<KvPlotSeries>& series, double full_perplexity,
                   const std::string& title);

}  // namespace kvlm::apps
