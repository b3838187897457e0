// Which worker answered each stored OpenAI Response (POST /v1/responses),
// and under which of the router's API keys: a follow-up
// (previous_response_id, or an item_reference to one of its output items),
// a GET, a DELETE or an input-item listing of that id goes back to it,
// where the response and its conversation's KV are, and only for the same
// key. Workers that share a Redis tier also find each other's responses
// there, so a forgotten or departed owner costs KV, not the conversation.
// Internal to router/.
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
  struct Owner {
    std::string worker_url;
    std::string key_name;  // the client's API key's name; "" when the router has no keys
  };
  explicit ResponseOwners(size_t capacity = 100000) : capacity_(capacity) {}

  // `id`: a Response's id, or the id of one of its items.
  void remember(const std::string& id, Owner owner) {
    std::lock_guard lock(mu_);
    if (auto it = index_.find(id); it != index_.end()) order_.erase(it->second);
    order_.emplace_front(id, std::move(owner));
    index_[id] = order_.begin();
    while (order_.size() > capacity_) {  // the oldest conversations go first
      index_.erase(order_.back().first);
      order_.pop_back();
    }
  }

  std::optional<Owner> owner(const std::string& id) const {
    std::lock_guard lock(mu_);
    const auto it = index_.find(id);
    if (it == index_.end()) return std::nullopt;
    return it->second->second;
  }

 private:
  using Entry = std::pair<std::string, Owner>;
  const size_t capacity_;
  mutable std::mutex mu_;
  std::list<Entry> order_;  // newest first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
};

}  // namespace kvlm::router
