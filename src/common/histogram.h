// A Prometheus-style cumulative histogram over fixed bucket bounds: counts
// per bucket, sum and count. Plain data; the engine guards it with its lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvlm {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);  // ascending; +Inf is implicit

  void observe(double value);

  const std::vector<double>& upper_bounds() const { return bounds_; }
  // Observations <= upper_bounds()[i] (cumulative, as Prometheus exposes them).
  uint64_t cumulative_count(size_t i) const;
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }
  // The value below which a fraction q of observations fall, by linear
  // interpolation inside the bucket (as Prometheus' histogram_quantile).
  double quantile(double q) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, plus one for +Inf
  uint64_t count_ = 0;
  double sum_ = 0;
};

// Bucket bounds in seconds for latencies from 1 ms to a minute.
std::vector<double> latency_buckets_s();
// Bucket bounds in tokens, powers of two from 16 to 1M.
std::vector<double> token_buckets();

}  // namespace kvlm
