#include "apps/bench_stats.h"

#include <algorithm>
#include <cmath>

namespace kvlm::apps {

Summary summarize(std::vector<double> v) {
  Summary s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / v.size();
  // Nearest rank: the smallest value with at least p of the sample at or below it.
  auto pct = [&](double p) {
    const size_t rank = static_cast<size_t>(std::ceil(p * v.size()));
    return v[std::min(rank == 0 ? 0 : rank - 1, v.size() - 1)];
  };
  s.p50 = pct(0.50);
  s.p90 = pct(0.90);
  s.p99 = pct(0.99);
  s.max = v.back();
  return s;
}

nlohmann::json to_json(const Summary& s) {
  return {{"mean", s.mean}, {"p50", s.p50}, {"p90", s.p90}, {"p99", s.p99}, {"max", s.max}};
}

}  // namespace kvlm::apps
