// The shared tier on Redis (one server or a Redis Cluster).
//
// Keys: "kvlm:<tier id hex>:<name hex>" (RecordCodec: the namespace and the
// block hash without a tier secret, keyed hashes of them with one), values:
// whole records (record_codec.h), so a reader verifies exactly what a writer
// wrote, and a key evicted by Redis (maxmemory, TTL) in the middle of a chain
// just ends the hit there.
//
// Round trips: store() sends `SET key value NX EX ttl` for every record in one
// pipeline (per node on a cluster); NX keeps the first writer's bytes, so two
// servers that computed the same block do not rewrite it. Every record gets
// the TTL. A key whose value a lookup refused (it does not verify, is not a
// string, is too long) is written without NX the next time its block is
// stored, so whatever was planted there is replaced, not kept. load() sends
// one pipelined GET per block and keeps the leading run of valid records;
// probe() the same with EXISTS. MGET is not used: in a cluster, keys of one
// chain live in different slots, and per-key GETs in one pipeline cost the
// same one round trip.
//
// Every failure is a miss or a dropped write plus a counter: server down or
// slow (timeouts, then the breaker of redis_link.h), `-OOM` under
// maxmemory-policy noeviction, any other error reply, a record that does not
// decode or verify (counted by TierRefusal). Warnings at most one every few
// seconds.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>

#include "kvstore/kv_store.h"
#include "kvstore/rate_limited_log.h"
#include "kvstore/record_codec.h"
#include "kvstore/redis_cluster.h"

namespace kvlm {

struct RedisStoreConfig {
  std::string url;               // redis://HOST:PORT[/DB] or redis+cluster://HOST:PORT,...
  std::string password_file;     // first line is the password; "" for none
  int64_t ttl_s = 3600;          // EX of every SET; must be positive
  Hash128 ns;                    // namespace fingerprint
  RedisLinkOptions link;         // timeouts and backoff (password and db are filled from the above)
  TierSecurity security = {};    // --kv-secret-file, --kv-encrypt
  // The model's blocks, which bound a GET's reply (the largest legal
  // record); payload_bytes 0: ReplyLimits' default bound.
  int32_t block_size = 16;
  size_t payload_bytes = 0;
};

class RedisStore final : public KvStore {
 public:
  // Throws Error(kInvalidArgument / kNotFound) for a bad URL, an unreadable
  // password file or a TTL that is not positive; never for a server that is
  // down (it connects lazily).
  static std::unique_ptr<RedisStore> open(const RedisStoreConfig& config);

  std::string_view name() const override { return "redis"; }
  size_t probe(std::span<const BlockHash> hashes) override;
  std::vector<KvRecord> load(std::span<const BlockHash> hashes, const Deadline& deadline) override;
  size_t store(std::span<const KvRecord> records) override;
  TierStats stats() const override;  // never waits for the network
  using KvStore::load;

  std::string key(const BlockHash& h) const;
  const RecordCodec& codec() const { return codec_; }
  // MOVED/ASK replies followed so far (cluster tests).
  int64_t num_redirects() const;

 private:
  RedisStore(const RedisStoreConfig& config, std::unique_ptr<RedisRouter> router);
  void note_failure(const char* what, const std::string& why);
  // Counts a refused value at `key` and marks it for overwriting. Holds mu_.
  void refuse(TierRefusal why, const std::string& key, std::string_view detail);
  // One GET reply: the record, or nullopt (miss, failure or refusal, counted).
  std::optional<KvRecord> take_reply(const std::optional<RedisReply>& r, const BlockHash& h, const std::string& key);
  // router_->execute, then publishes up_ (false when no command of the call
  // got a usable reply) and num_redirects_. Holds mu_.
  std::vector<std::optional<RedisReply>> execute(std::span<const RedisCommand> commands, const RedisCall& call);
  // Counts a lookup's missing reply by why it is missing.
  void note_missing(const std::string& key);

  RedisStoreConfig config_;
  RecordCodec codec_;
  std::string key_prefix_;
  ReplyLimits get_limits_;     // a GET's reply: one string, at most the largest legal record
  mutable std::mutex mu_;  // the router's links are single-threaded
  std::unique_ptr<RedisRouter> router_;
  std::unordered_set<std::string> overwrite_;  // keys whose value was refused (bounded)
  std::atomic<bool> up_{true};
  std::atomic<int64_t> num_redirects_{0};
  TierCounters counters_;
  RateLimitedLog warn_{"redis"};
};

}  // namespace kvlm
