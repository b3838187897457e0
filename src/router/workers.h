// The router's workers and what it knows of each: health (with a circuit
// breaker), load (from the workers' KV-event stream or /v1/status, plus the
// router's own requests in flight), and the KV blocks each holds. One mutex
// guards all of it: routing reads every worker at once, and the writers
// (health checker, event readers, request threads) hold it briefly.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "router/kv_index.h"
#include "router/upstream.h"

namespace kvlm::router {

using Clock = std::chrono::steady_clock;

enum class WorkerState {
  kUp,        // takes requests
  kDraining,  // /health 503: finishes what it has, takes nothing new
  kDown,      // not answering (health check failed) or its circuit is open
};
const char* worker_state_name(WorkerState s);

// What a worker reports of its load (KV-event load lines, /v1/status).
struct WorkerLoad {
  int32_t num_running = 0;
  int32_t num_waiting = 0;
  int64_t num_pending_tokens = 0;  // tokens to compute before each of its requests samples
  int32_t num_kv_blocks_free = 0;
  int32_t num_kv_blocks_total = 0;
};

// One worker. Shared (shared_ptr) because requests in flight keep using a
// worker that membership has just dropped. Fields after `link` are guarded
// by WorkerSet::mu().
struct Worker {
  explicit Worker(WorkerAddress address) : link(std::move(address)) {}
  const std::string& url() const { return link.address().url; }

  UpstreamLink link;  // thread-safe itself

  WorkerState state = WorkerState::kUp;
  std::string down_reason;
  int32_t num_consecutive_failures = 0;  // requests that failed in a row (the breaker)
  Clock::time_point open_until{};        // circuit open: no requests before this
  WorkerLoad load;
  bool load_from_events = false;         // load lines arrive (fresher than /v1/status)
  int32_t num_in_flight = 0;             // the router's requests on it now
  int64_t num_outstanding_tokens = 0;    // their predicted uncached prompt tokens, until each one's first token
  int64_t num_requests = 0;              // sent to it since start
  // KV events (router/events.cpp).
  WorkerKvIndex kv;
  bool kv_events_live = false;
  int32_t block_size = 0;                // 0: not known yet
  std::string instance;                  // the worker process's id (a restart changes it)
  std::optional<std::string> shared_tier;  // its shared tier's namespace, if it has one
  std::chrono::seconds shared_tier_ttl{3600};
  // The LoRA adapters it serves, by name: each one's identity (its load
  // lines); nullopt until it has said.
  std::optional<std::map<std::string, Hash128>> loras;
  // The model names it serves (its /v1/status `models`, or what the model
  // host started it with); nullopt until known. A request naming a model
  // some worker serves goes only to workers that serve it.
  std::optional<std::set<std::string>> models;
  nlohmann::json status;                 // its last /v1/status
  bool member = true;                    // false once membership dropped it
};

// Settings of the breaker and the health checks.
struct HealthConfig {
  std::chrono::milliseconds interval{1000};  // between checks of one worker
  std::chrono::milliseconds timeout{2000};   // a check not answered by then fails
  int32_t max_failures = 3;                  // request failures in a row that open the circuit
  std::chrono::milliseconds open_for{2000};  // how long it stays open before the next check may close it
};

class WorkerSet {
 public:
  explicit WorkerSet(HealthConfig config) : config_(config) {}

  // Adds a worker (idempotent: an existing one is returned).
  std::shared_ptr<Worker> add(const std::string& url);
  // Drops a worker from membership; requests in flight finish on it.
  void remove(const std::string& url);
  std::vector<std::shared_ptr<Worker>> all() const;
  std::vector<std::shared_ptr<Worker>> all_locked() const;  // with mu() held
  std::shared_ptr<Worker> find(const std::string& url) const;

  // Guards every Worker field marked so, and the shared-tier index.
  std::mutex& mu() const { return mu_; }
  SharedTierIndex& shared_tier() { return shared_tier_; }  // under mu()

  // Whether `w` may take a new request now (under mu()).
  bool routable(const Worker& w, Clock::time_point now) const;

  // A request failed on `w` for a reason of the worker's (connect refused,
  // reset, no answer): after max_failures in a row its circuit opens. Also
  // aborts what else is in flight on it when it goes down.
  void report_failure(Worker& w, const std::string& why);
  void report_success(Worker& w);
  // The health checker's verdict: down aborts what is in flight there.
  void set_health(Worker& w, WorkerState state, const std::string& why);

  const HealthConfig& config() const { return config_; }
  // Times each worker went up or down (metrics).
  std::map<std::string, std::pair<int64_t, int64_t>> transitions() const;

 private:
  void go_down(Worker& w, const std::string& why);  // under mu_

  const HealthConfig config_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Worker>> workers_;
  std::map<std::string, std::pair<int64_t, int64_t>> transitions_;  // url -> (ups, downs)
  SharedTierIndex shared_tier_;
};

}  // namespace kvlm::router
