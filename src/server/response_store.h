// The responses kept for GET /v1/responses/{id} and previous_response_id
// (a Responses request's store: true): each response object, and its
// conversation through it as chat messages (without instructions, as
// OpenAI carries them: not at all). A continued conversation's prompt
// starts with the stored one's prompt and answer, so the prefix cache (and
// the KV tiers) serve it. In memory: past `capacity`, the oldest go. Shared
// (share()): also in Redis (the KV tier's, --kv-redis) under
// "kvlm:response:ID" with the tier's expiry, so any server sharing it can
// continue or return a stored response; a Redis that is down only makes
// the sharing miss.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

namespace kvlm {

class RedisRouter;

class ResponseStore {
 public:
  struct Stored {
    nlohmann::json response;
    nlohmann::json messages;
  };
  explicit ResponseStore(size_t capacity = 10000);
  ~ResponseStore();
  // Keeps every response in `redis` too (and looks there for one not here),
  // each expiring after `ttl_s` seconds.
  void share(std::unique_ptr<RedisRouter> redis, int64_t ttl_s);

  void put(const std::string& id, Stored s);
  std::optional<Stored> get(const std::string& id) const;
  // False when there was none.
  bool erase(const std::string& id);

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::string, Stored> by_id_;
  std::deque<std::string> order_;  // oldest first (erased ids stay until they reach the front)
  size_t capacity_;
  mutable std::mutex redis_mu_;  // a RedisRouter has one user at a time
  std::unique_ptr<RedisRouter> redis_;
  int64_t ttl_s_ = 3600;
};

}  // namespace kvlm
