// The router's own metrics, exported on its /metrics (Prometheus text):
// requests per worker and policy decision, retries, resumed streams, the
// cached tokens it predicted against what the workers reported, and the
// latency it adds before a request reaches a worker. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "common/histogram.h"

namespace kvlm::router {

class WorkerSet;

class RouterMetrics {
 public:
  RouterMetrics();

  void routed(const std::string& worker, const std::string& reason);
  void retried() { ++num_retries_; }
  void stream_resumed() { ++num_resumed_streams_; }
  void resume_failed() { ++num_resume_failures_; }
  void no_worker() { ++num_no_worker_; }
  void answered(int status);
  // A request's predicted cached tokens beside the worker's usage report.
  void cached_tokens(int32_t predicted, int32_t reported);
  // Seconds from a request's arrival to its bytes going out to a worker.
  void added_latency(double seconds);

  struct Predictions {
    int64_t num_exact = 0, num_over = 0, num_under = 0;
    int64_t predicted_tokens = 0, reported_tokens = 0;
  };
  Predictions predictions() const;
  int64_t num_resumed_streams() const { return num_resumed_streams_; }
  int64_t num_retries() const { return num_retries_; }

  // The exposition text: these metrics and, from `workers`, each worker's
  // state, load and transitions.
  std::string prometheus_text(const WorkerSet& workers) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, std::string>, int64_t> num_routed_;  // (worker, reason)
  std::map<int, int64_t> num_answered_;                                // by status
  Predictions predictions_;
  Histogram added_latency_s_;
  std::atomic<int64_t> num_retries_{0}, num_resumed_streams_{0}, num_resume_failures_{0}, num_no_worker_{0};
};

}  // namespace kvlm::router
