// What the router knows of the KV blocks each worker holds (fed by the
// workers' KV events, docs/router.md), and of the blocks in a shared Redis
// tier that every worker of its namespace can load.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kv/block_hash.h"

namespace kvlm::router {

// One worker's prefix-cache contents, as its events describe them, and the
// blocks of prompts just routed there that its events have not confirmed yet
// (pending: the worker computes them first thing, and a request sent after
// them finds them cached, so a tenant's requests keep going to one worker
// while its first prompt is still being computed).
class WorkerKvIndex {
 public:
  using Clock = std::chrono::steady_clock;
  // A snapshot replaces everything (a new connection, a restarted worker,
  // or a reader that fell behind).
  void reset(std::vector<BlockHash> hashes, uint64_t seq);
  // One batch; false (nothing applied) when it does not follow the last one:
  // the reader must resynchronise from a snapshot.
  bool apply(uint64_t seq, std::span<const BlockHash> stored, std::span<const BlockHash> removed);
  // Forgets everything (the worker left or its stream broke).
  void clear();

  // How many of `chain` (a prompt's block hashes in order) the worker holds
  // from the start: the blocks its prefix cache will hit. Pending blocks
  // count until `now` passes their expiry.
  int32_t num_leading(std::span<const BlockHash> chain, Clock::time_point now = Clock::time_point::min()) const;
  // The blocks of a prompt just sent to the worker, pending until its events
  // list them or `ttl` has passed.
  void add_pending(std::span<const BlockHash> chain, Clock::time_point now, Clock::duration ttl);
  size_t size() const { return held_.size(); }
  size_t num_pending() const { return pending_.size(); }
  std::optional<uint64_t> seq() const { return seq_; }

 private:
  std::unordered_set<BlockHash> held_;
  std::unordered_map<BlockHash, Clock::time_point> pending_;  // hash -> until
  std::optional<uint64_t> seq_;  // nullopt: no snapshot yet
};

// Blocks some worker with a shared tier stored: written behind to that tier,
// so any worker of the same namespace can load them. An approximation (the
// write may be dropped, Redis may evict): entries expire after the tier's
// TTL, and the set keeps at most `max_entries` (oldest out first).
class SharedTierIndex {
 public:
  using Clock = std::chrono::steady_clock;
  explicit SharedTierIndex(size_t max_entries = 1 << 20) : max_entries_(max_entries) {}
  void add(const std::string& ns, std::span<const BlockHash> hashes, std::chrono::seconds ttl, Clock::time_point now);
  // Blocks of `chain` after the first `skip`, held in tier `ns`, without a gap.
  int32_t num_following(const std::string& ns, std::span<const BlockHash> chain, size_t skip,
                        Clock::time_point now) const;
  size_t size() const { return expiry_.size(); }

 private:
  struct Key {
    std::string ns;
    BlockHash hash;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const { return std::hash<BlockHash>{}(k.hash) ^ std::hash<std::string>{}(k.ns); }
  };
  size_t max_entries_;
  std::unordered_map<Key, Clock::time_point, KeyHash> expiry_;
  std::vector<Key> order_;  // insertion order, for the cap (swept lazily)
  size_t order_start_ = 0;
};

}  // namespace kvlm::router
