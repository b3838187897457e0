// Summaries shared by the benchmarks (bench batch, bench serve): mean,
// nearest-rank percentiles and the maximum of a sample, as text and as JSON.
// The maximum shows a stall that hits every running stream at once, which
// stays under p99 where it is one step in hundreds.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

namespace kvlm::apps {

struct Summary {
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;  // all 0 for an empty sample
};

Summary summarize(std::vector<double> v);
nlohmann::json to_json(const Summary& s);

}  // namespace kvlm::apps
