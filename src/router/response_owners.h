// Which worker answered each stored OpenAI Response (POST /v1/responses):
// a follow-up (previous_response_id), a GET or a DELETE of that id goes
// back to it, where the response and its conversation's KV are. Workers
// that share a Redis tier also find each other's responses there, so a
// forgotten or departed owner costs KV, not the conversation. Internal to
// router/.
#pragma once

#include <cstddef>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

namespace kvlm::router {

class ResponseOwners {
 public:
  explicit ResponseOwners(size_t capacity = 100000) : capacity_(capacity) {}

  void remember(const std::string& response_id, const std::string& worker_url) {
    std::lock_guard lock(mu_);
    if (auto it = index_.find(response_id); it != index_.end()) order_.erase(it->second);
    order_.emplace_front(response_id, worker_url);
    index_[response_id] = order_.begin();
    while (order_.size() > capacity_) {  // the oldest conversations go first
      index_.erase(order_.back().first);
      order_.pop_back();
    }
  }

  std::optional<std::string> owner(const std::string& response_id) const {
    std::lock_guard lock(mu_);
    const auto it = index_.find(response_id);
    if (it == index_.end()) return std::nullopt;
    return it->second->second;
  }

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::list<std::pair<std::string, std::string>> order_;  // newest first
  std::unordered_map<std::string, std::list<std::pair<std::string, std::string>>::iterator> index_;
};

}  // namespace kvlm::router
