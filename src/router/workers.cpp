#include "router/workers.h"

#include "common/log.h"

namespace kvlm::router {

const char* worker_state_name(WorkerState s) {
  switch (s) {
    case WorkerState::kUp: return "up";
    case WorkerState::kDraining: return "draining";
    case WorkerState::kDown: return "down";
  }
  return "down";
}

std::shared_ptr<Worker> WorkerSet::add(const std::string& url) {
  WorkerAddress address = parse_worker_url(url);
  std::lock_guard lock(mu_);
  auto it = workers_.find(address.url);
  if (it != workers_.end()) {
    it->second->member = true;
    return it->second;
  }
  auto w = std::make_shared<Worker>(std::move(address));
  workers_.emplace(w->url(), w);
  log_info("router: worker {} joined", w->url());
  return w;
}

void WorkerSet::remove(const std::string& url) {
  std::lock_guard lock(mu_);
  auto it = workers_.find(url);
  if (it == workers_.end()) return;
  it->second->member = false;
  workers_.erase(it);
  log_info("router: worker {} left", url);
}

std::vector<std::shared_ptr<Worker>> WorkerSet::all() const {
  std::lock_guard lock(mu_);
  return all_locked();
}

std::vector<std::shared_ptr<Worker>> WorkerSet::all_locked() const {
  std::vector<std::shared_ptr<Worker>> out;
  for (const auto& [url, w] : workers_) out.push_back(w);
  return out;
}

std::shared_ptr<Worker> WorkerSet::find(const std::string& url) const {
  std::lock_guard lock(mu_);
  auto it = workers_.find(url);
  return it == workers_.end() ? nullptr : it->second;
}

bool WorkerSet::routable(const Worker& w, Clock::time_point now) const {
  return w.member && w.state == WorkerState::kUp && now >= w.open_until;
}

void WorkerSet::go_down(Worker& w, const std::string& why) {
  if (w.state != WorkerState::kDown) {
    log_warn("router: worker {} is down: {}", w.url(), why);
    ++transitions_[w.url()].second;
  }
  w.state = WorkerState::kDown;
  w.down_reason = why;
  w.kv_events_live = false;
  // Streams there go on elsewhere; requests not yet answered are retried.
  w.link.abort_all();
}

void WorkerSet::report_failure(Worker& w, const std::string& why) {
  std::lock_guard lock(mu_);
  if (++w.num_consecutive_failures < config_.max_failures) return;
  w.open_until = Clock::now() + config_.open_for;
  go_down(w, why);
}

void WorkerSet::report_success(Worker& w) {
  std::lock_guard lock(mu_);
  w.num_consecutive_failures = 0;
}

void WorkerSet::set_health(Worker& w, WorkerState state, const std::string& why) {
  std::lock_guard lock(mu_);
  if (state == WorkerState::kDown) return go_down(w, why);
  // An open circuit closes only after its time, at a check that passes.
  if (w.state == WorkerState::kDown && Clock::now() < w.open_until) return;
  if (w.state == WorkerState::kDown) {
    log_info("router: worker {} is {}", w.url(), worker_state_name(state));
    ++transitions_[w.url()].first;
    w.num_consecutive_failures = 0;
  } else if (w.state != state) {
    log_info("router: worker {} is {}", w.url(), worker_state_name(state));
  }
  w.state = state;
  w.down_reason.clear();
}

std::map<std::string, std::pair<int64_t, int64_t>> WorkerSet::transitions() const {
  std::lock_guard lock(mu_);
  return transitions_;
}

}  // namespace kvlm::router
