#include "server/in_flight.h"

#include <vector>

#include "engine/engine.h"

namespace kvlm {

InFlightRequests::Ticket::~Ticket() { owner_.leave(key_); }

bool InFlightRequests::Ticket::set_requests(const std::vector<RequestId>& ids) { return owner_.set_requests(key_, ids); }

std::unique_ptr<InFlightRequests::Ticket> InFlightRequests::enter() {
  std::lock_guard lock(mu_);
  const uint64_t key = next_key_++;
  live_.emplace(key, std::vector<RequestId>{});
  return std::make_unique<Ticket>(*this, key);
}

bool InFlightRequests::draining() const {
  std::lock_guard lock(mu_);
  return draining_;
}

size_t InFlightRequests::size() const {
  std::lock_guard lock(mu_);
  return live_.size();
}

void InFlightRequests::leave(uint64_t key) {
  std::lock_guard lock(mu_);
  live_.erase(key);
  cv_.notify_all();
}

bool InFlightRequests::set_requests(uint64_t key, const std::vector<RequestId>& ids) {
  std::lock_guard lock(mu_);
  if (auto it = live_.find(key); it != live_.end()) it->second = ids;
  return !cancelling_;
}

size_t InFlightRequests::drain(Engine& engine, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  draining_ = true;
  if (cv_.wait_for(lock, timeout, [&] { return live_.empty(); })) return 0;
  std::vector<RequestId> left;
  for (const auto& [key, ids] : live_) left.insert(left.end(), ids.begin(), ids.end());
  const size_t num_left = live_.size();
  cancelling_ = true;
  lock.unlock();
  // A cancelled request ends at the engine's next step; its handler then
  // writes the end of its response and gives its ticket back.
  for (RequestId id : left) engine.cancel(id);
  lock.lock();
  // Requests submitted after we looked cancel themselves (set_request), so
  // this wait ends; the bound only guards against a client that stops
  // reading its stream (the transport's write timeout ends that one).
  cv_.wait_for(lock, std::chrono::seconds(10), [&] { return live_.empty(); });
  return num_left;
}

}  // namespace kvlm
