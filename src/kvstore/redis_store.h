// The shared tier on Redis (one server or a Redis Cluster).
//
// Keys: "kvlm:<namespace hex>:<block hash hex>", values: whole records
// (record.h), so a reader validates exactly what a writer wrote, and a key
// evicted by Redis (maxmemory, TTL) in the middle of a chain just ends the hit
// there.
//
// Round trips: store() sends `SET key value NX EX ttl` for every record in one
// pipeline (per node on a cluster); NX keeps the first writer's bytes, so two
// servers that computed the same block do not rewrite it. load() sends one
// pipelined GET per block and keeps the leading run of valid records; probe()
// the same with EXISTS. MGET is not used: in a cluster, keys of one chain
// live in different slots, and per-key GETs in one pipeline cost the same one
// round trip.
//
// Every failure is a miss or a dropped write plus a counter: server down or
// slow (timeouts, then the breaker of redis_link.h), `-OOM` under
// maxmemory-policy noeviction, any other error reply, a record that does not
// decode. Warnings at most one every few seconds.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "kvstore/kv_store.h"
#include "kvstore/rate_limited_log.h"
#include "kvstore/redis_cluster.h"

namespace kvlm {

struct RedisStoreConfig {
  std::string url;               // redis://HOST:PORT[/DB] or redis+cluster://HOST:PORT,...
  std::string password_file;     // first line is the password; "" for none
  int64_t ttl_s = 3600;          // EX of every SET; <= 0: no expiry
  Hash128 ns;                    // namespace fingerprint
  RedisLinkOptions link;         // timeouts and backoff (password and db are filled from the above)
};

class RedisStore final : public KvStore {
 public:
  // Throws Error(kInvalidArgument / kNotFound) for a bad URL or an unreadable
  // password file; never for a server that is down (it connects lazily).
  static std::unique_ptr<RedisStore> open(const RedisStoreConfig& config);

  std::string_view name() const override { return "redis"; }
  size_t probe(std::span<const BlockHash> hashes) override;
  std::vector<KvRecord> load(std::span<const BlockHash> hashes) override;
  size_t store(std::span<const KvRecord> records) override;
  TierStats stats() const override;  // never waits for the network

  std::string key(const BlockHash& h) const;
  // MOVED/ASK replies followed so far (cluster tests).
  int64_t num_redirects() const;

 private:
  RedisStore(const RedisStoreConfig& config, std::unique_ptr<RedisRouter> router);
  void note_failure(const char* what, const std::string& why);
  // router_->execute, then publishes up_ and num_redirects_. Holds mu_.
  std::vector<std::optional<RedisReply>> execute(std::span<const RedisCommand> commands);

  RedisStoreConfig config_;
  std::string key_prefix_;
  mutable std::mutex mu_;  // the router's links are single-threaded
  std::unique_ptr<RedisRouter> router_;
  std::atomic<bool> up_{true};
  std::atomic<int64_t> num_redirects_{0};
  TierCounters counters_;
  RateLimitedLog warn_{"redis"};
};

}  // namespace kvlm
