// The responses kept for GET /v1/responses/{id} and previous_response_id
// (a Responses request's store: true): each response object, its
// conversation through it as chat messages (without instructions, as
// OpenAI carries them: not at all), its request's input items (GET
// /v1/responses/{id}/input_items) and the name of the API key it was
// stored under. A continued conversation's prompt starts with the stored
// one's prompt and answer, so the prefix cache (and the KV tiers) serve it.
// Every item of a stored response (output and input) can be found by its id
// (an item_reference input item). In memory: past `capacity`, the oldest
// go. Shared (share()): also in Redis (the KV tier's, --kv-redis) under
// "kvlm:response:ID", each item's response under "kvlm:response-item:ID",
// with the tier's expiry, so any server sharing it can continue or return a
// stored response; a Redis that is down only makes the sharing miss.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvlm {

class RedisRouter;

class ResponseStore {
 public:
  struct Stored {
    nlohmann::json response;
    nlohmann::json messages;
    nlohmann::json input_items = nlohmann::json::array();  // each with its "id"
    std::string owner{};  // the API key's name; "": stored without keys, anyone reads it
  };
  // An item of a stored response and the owner of that response.
  struct FoundItem {
    nlohmann::json item;
    std::string owner;
  };
  explicit ResponseStore(size_t capacity = 10000);
  ~ResponseStore();
  // Keeps every response in `redis` too (and looks there for one not here),
  // each expiring after `ttl_s` seconds.
  void share(std::unique_ptr<RedisRouter> redis, int64_t ttl_s);

  void put(const std::string& id, Stored s);
  std::optional<Stored> get(const std::string& id) const;
  // The item `item_id` of a stored response (its output or its input),
  // or nullopt. An id in several responses (an item given again as input)
  // is found in the first that stored it, while that one is kept.
  std::optional<FoundItem> find_item(const std::string& item_id) const;
  // False when there was none.
  bool erase(const std::string& id);

  // Whether a request under the key named `key_name` may read what `owner`
  // stored: its own, or what was stored without keys.
  static bool readable(const std::string& owner, const std::string& key_name) {
    return owner.empty() || owner == key_name;
  }

 private:
  void index_items(const std::string& id, const Stored& s);    // under mu_
  void unindex_items(const std::string& id, const Stored& s);  // under mu_
  void put_shared(const std::string& id, const Stored& s);
  std::optional<Stored> get_shared(const std::string& id) const;

  mutable std::mutex mu_;
  std::unordered_map<std::string, Stored> by_id_;
  std::unordered_map<std::string, std::string> response_of_item_;  // item id -> response id
  std::deque<std::string> order_;  // oldest first (erased ids stay until they reach the front)
  size_t capacity_;
  mutable std::mutex redis_mu_;  // a RedisRouter has one user at a time
  std::unique_ptr<RedisRouter> redis_;
  int64_t ttl_s_ = 3600;
};

// The ids of a stored response's items: its output's, then its input's.
std::vector<std::string> item_ids(const ResponseStore::Stored& s);

}  // namespace kvlm
