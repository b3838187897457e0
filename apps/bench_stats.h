// Summaries shared by the benchmarks (bench batch, bench serve): mean and
// nearest-rank percentiles of a sample, as text and as JSON.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

namespace kvlm::apps {

struct Summary {
  double mean = 0, p50 = 0, p90 = 0, p99 = 0;  // all 0 for an empty sample
};

Summary summarize(std::vector<double> v);
nlohmann::json to_json(const Summary& s);

}  // namespace kvlm::apps
