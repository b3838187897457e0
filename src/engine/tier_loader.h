// The engine's side of the KV tiers (docs/ARCHITECTURE.md "Tiers",
// kvstore/tier_stack.h): the requests waiting for a tier lookup, when each
// stops being waited for, and newly full blocks going down. Engine thread
// only, but for tier_stats(). Nothing here waits on a tier: lookups and
// writes are handed over, completions polled, and a lookup not answered by
// its deadline is given up (the request is admitted as a miss; its late
// answer is dropped).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/strong_id.h"
#include "kvstore/tier_stack.h"

namespace kvlm {

class KvCacheManager;
class KvStorage;
struct Request;

class TierLoader {
 public:
  TierLoader() = default;  // no tiers: every call is a no-op, no request ever waits
  // block_bytes: KvStorage::bytes_per_block of the pool the blocks move through.
  TierLoader(std::unique_ptr<TierStack> tiers, size_t block_bytes);
  ~TierLoader();
  TierLoader(TierLoader&&) noexcept;
  TierLoader& operator=(TierLoader&&) noexcept;

  bool enabled() const { return tiers_ != nullptr; }
  // A new request whose prompt runs past its RAM prefix hit: its lookup is
  // started and the request kept here (true). false: `request` is left as it
  // was, for the caller to admit.
  bool begin_lookup(std::unique_ptr<Request>& request, KvCacheManager& kv);
  // The requests to admit now, in order: those whose lookup finished (its
  // blocks imported into the pool as free cached blocks, when it has room),
  // then those whose lookup is past its deadline (they go on as misses).
  std::vector<std::unique_ptr<Request>> take_ready(KvCacheManager& kv, KvStorage& storage);
  // The blocks the last step published, copied out and queued for the tiers
  // (the published list is taken even without tiers, so it never grows).
  void store_published(KvCacheManager& kv, const KvStorage& storage);
  // A request that ended while it waited: its answer will be dropped.
  void erase(RequestId id) { loading_.erase(id); }
  void clear();
  // At shutdown; false if queued writes were not all written within timeout_s.
  bool flush(double timeout_s);

  bool empty() const { return loading_.empty(); }
  size_t num_loading() const { return loading_.size(); }
  int64_t num_loading_tokens() const;  // the waiting requests' tokens, all still to compute
  // Per-tier counters (any thread: TierStack::stats never waits on a tier).
  std::vector<TierStats> tier_stats() const;

  // Counters since the start, for EngineMetrics.
  int64_t num_hit_tokens() const { return num_hit_tokens_; }
  int64_t num_writes_queued() const { return num_writes_queued_; }
  int64_t num_writes_dropped() const { return num_writes_dropped_; }
  int64_t num_lookups_timed_out() const { return num_lookups_timed_out_; }

 private:
  std::unique_ptr<TierStack> tiers_;  // null without tiers
  std::unordered_map<RequestId, std::unique_ptr<Request>> loading_;
  // When each lookup stops being waited for (steady clock, as the tiers'
  // deadlines), in the order they began; entries of finished lookups are skipped.
  std::deque<std::pair<double, RequestId>> deadlines_;
  std::vector<std::byte> block_bytes_;  // one block's copy on its way down
  int64_t num_hit_tokens_ = 0, num_writes_queued_ = 0, num_writes_dropped_ = 0, num_lookups_timed_out_ = 0;
};

}  // namespace kvlm
