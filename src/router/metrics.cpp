#include "router/metrics.h"

#include <fmt/format.h>

#include "router/workers.h"

namespace kvlm::router {
namespace {

// From 50 us: what the router adds is meant to stay far under a millisecond.
std::vector<double> added_latency_buckets_s() {
  return {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0};
}

std::string escape_label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    if (c == '\\' || c == '"') out += '\\';
    out += c;
  }
  return out;
}

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void histogram(std::string& out, const char* name, const char* help, const Histogram& h) {
  header(out, name, "histogram", help);
  for (size_t i = 0; i < h.upper_bounds().size(); ++i)
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, h.upper_bounds()[i], h.cumulative_count(i));
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, h.count(), name, h.sum(), name,
                     h.count());
}

// Per worker: up, its load, our requests in flight, the blocks we know it holds.
void worker_gauges(std::string& out, const WorkerSet& workers) {
  struct Row {
    std::string url;
    int up, draining;
    WorkerLoad load;
    int32_t in_flight;
    size_t blocks;
  };
  std::vector<Row> rows;
  {
    std::lock_guard lock(workers.mu());
    for (const auto& w : workers.all_locked())
      rows.push_back({w->url(), w->state == WorkerState::kUp ? 1 : 0, w->state == WorkerState::kDraining ? 1 : 0,
                      w->load, w->num_in_flight, w->kv.size()});
  }
  auto gauge = [&](const char* name, const char* help, auto value) {
    header(out, name, "gauge", help);
    for (const Row& r : rows) out += fmt::format("{}{{worker=\"{}\"}} {}\n", name, escape_label(r.url), value(r));
  };
  gauge("kvlm_router_worker_up", "1 while the worker takes requests", [](const Row& r) { return r.up; });
  gauge("kvlm_router_worker_draining", "1 while the worker drains", [](const Row& r) { return r.draining; });
  gauge("kvlm_router_worker_requests_in_flight", "requests the router has on the worker now",
        [](const Row& r) { return r.in_flight; });
  gauge("kvlm_router_worker_pending_tokens", "tokens the worker reports it must compute before its requests sample",
        [](const Row& r) { return r.load.num_pending_tokens; });
  gauge("kvlm_router_worker_kv_blocks", "KV blocks the router knows the worker holds (its KV events)",
        [](const Row& r) { return r.blocks; });
  const auto transitions = workers.transitions();
  header(out, "kvlm_router_worker_transitions_total", "counter", "times a worker came up or went down");
  for (const auto& [url, t] : transitions) {
    out += fmt::format("kvlm_router_worker_transitions_total{{worker=\"{}\",to=\"up\"}} {}\n", escape_label(url), t.first);
    out += fmt::format("kvlm_router_worker_transitions_total{{worker=\"{}\",to=\"down\"}} {}\n", escape_label(url),
                       t.second);
  }
}

}  // namespace

RouterMetrics::RouterMetrics() : added_latency_s_(added_latency_buckets_s()) {}

void RouterMetrics::routed(const std::string& worker, const std::string& reason) {
  std::lock_guard lock(mu_);
  ++num_routed_[{worker, reason}];
}

void RouterMetrics::answered(int status) {
  std::lock_guard lock(mu_);
  ++num_answered_[status];
}

void RouterMetrics::cached_tokens(int32_t predicted, int32_t reported) {
  std::lock_guard lock(mu_);
  Predictions& p = predictions_;
  (predicted == reported ? p.num_exact : predicted > reported ? p.num_over : p.num_under)++;
  p.predicted_tokens += predicted;
  p.reported_tokens += reported;
}

void RouterMetrics::added_latency(double seconds) {
  std::lock_guard lock(mu_);
  added_latency_s_.observe(seconds);
}

RouterMetrics::Predictions RouterMetrics::predictions() const {
  std::lock_guard lock(mu_);
  return predictions_;
}

std::string RouterMetrics::prometheus_text(const WorkerSet& workers) const {
  std::string out;
  {
    std::lock_guard lock(mu_);
    header(out, "kvlm_router_requests_total", "counter", "requests sent to each worker, by the policy's reason");
    for (const auto& [key, n] : num_routed_)
      out += fmt::format("kvlm_router_requests_total{{worker=\"{}\",reason=\"{}\"}} {}\n", escape_label(key.first),
                         escape_label(key.second), n);
    header(out, "kvlm_router_responses_total", "counter", "answers to clients, by HTTP status");
    for (const auto& [status, n] : num_answered_)
      out += fmt::format("kvlm_router_responses_total{{status=\"{}\"}} {}\n", status, n);
    const Predictions& p = predictions_;
    header(out, "kvlm_router_cache_predictions_total", "counter",
           "requests whose cached prompt tokens the router predicted, by how the worker's report compared");
    out += fmt::format("kvlm_router_cache_predictions_total{{result=\"exact\"}} {}\n", p.num_exact);
    out += fmt::format("kvlm_router_cache_predictions_total{{result=\"over\"}} {}\n", p.num_over);
    out += fmt::format("kvlm_router_cache_predictions_total{{result=\"under\"}} {}\n", p.num_under);
    header(out, "kvlm_router_predicted_cached_tokens_total", "counter", "prompt tokens the router predicted cached");
    out += fmt::format("kvlm_router_predicted_cached_tokens_total {}\n", p.predicted_tokens);
    header(out, "kvlm_router_reported_cached_tokens_total", "counter", "prompt tokens the workers reported cached");
    out += fmt::format("kvlm_router_reported_cached_tokens_total {}\n", p.reported_tokens);
    histogram(out, "kvlm_router_added_latency_seconds",
              "from a request's arrival to its bytes going out to a worker (parse, tokenize, route, connect)",
              added_latency_s_);
  }
  header(out, "kvlm_router_retries_total", "counter", "requests sent again to another worker before a byte was answered");
  out += fmt::format("kvlm_router_retries_total {}\n", num_retries_.load());
  header(out, "kvlm_router_resumed_streams_total", "counter", "streams continued on another worker after theirs failed");
  out += fmt::format("kvlm_router_resumed_streams_total {}\n", num_resumed_streams_.load());
  header(out, "kvlm_router_resume_failures_total", "counter", "streams that no worker could continue");
  out += fmt::format("kvlm_router_resume_failures_total {}\n", num_resume_failures_.load());
  header(out, "kvlm_router_no_worker_total", "counter", "requests refused because no worker could take them");
  out += fmt::format("kvlm_router_no_worker_total {}\n", num_no_worker_.load());
  worker_gauges(out, workers);
  return out;
}

}  // namespace kvlm::router
