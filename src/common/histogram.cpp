#include "common/histogram.h"

#include <algorithm>

#include "common/assert.h"

namespace kvlm {

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {
  KVLM_ASSERT(std::is_sorted(bounds_.begin(), bounds_.end()), "histogram bounds ascend");
}

void Histogram::observe(double value) {
  const size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  counts_[i]++;
  count_++;
  sum_ += value;
}

uint64_t Histogram::cumulative_count(size_t i) const {
  uint64_t n = 0;
  for (size_t b = 0; b <= i && b < counts_.size(); ++b) n += counts_[b];
  return n;
}

double Histogram::quantile(double q) const {
  if (count_ == 0) return 0;
  const double rank = q * static_cast<double>(count_);
  uint64_t below = 0;
  for (size_t b = 0; b < bounds_.size(); ++b) {
    if (static_cast<double>(below + counts_[b]) >= rank) {
      const double lo = b == 0 ? 0 : bounds_[b - 1];
      const double frac = counts_[b] ? (rank - below) / static_cast<double>(counts_[b]) : 0;
      return lo + (bounds_[b] - lo) * frac;
    }
    below += counts_[b];
  }
  return bounds_.empty() ? 0 : bounds_.back();  // in the +Inf bucket
}

std::vector<double> latency_buckets_s() {
  return {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
          0.75,  1.0,    2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 60.0};
}

std::vector<double> token_buckets() {
  std::vector<double> b;
  for (double x = 16; x <= (1 << 20); x *= 2) b.push_back(x);
  return b;
}

}  // namespace kvlm
