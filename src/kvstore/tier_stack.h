// The tiers behind the RAM pool, in order: disk, then Redis (docs/ARCHITECTURE.md
// "Tiers"), with their I/O thread. This is the whole surface the engine uses.
//
// Integration (engine/tier_loader.cpp). What the engine calls, all from its
// step thread, none of it blocking on a tier:
//
//   at start:        tiers = TierStack::open(config), config from
//                    apps/tier_options.h: make_tier_config(flags,
//                    kv_namespace_fingerprint(kv_namespace_spec(gguf,
//                    --kv-type, --block-size)), KvStorage::bytes_per_block)
//   block full:      when KvCacheManager::on_computed publishes a newly full
//                    block (hash h, parent p, its block_size tokens), the
//                    runner copies its bytes out (KvStorage::read_block) and
//                    the engine calls tiers->enqueue_store(h, p, tokens, bytes).
//                    Chosen over "when it leaves the free-block LRU": a block
//                    evicted from RAM is then already safe below, a crash
//                    loses nothing, and the copy happens while its bytes are
//                    certainly intact (a block reused by allocation is gone).
//   new request:     after the RAM prefix hit of n blocks, for the prompt's
//                    remaining full blocks (leaving one token to compute):
//                    tiers->begin_lookup(request, hash of block n-1 or nullopt,
//                    their hashes, their tokens); the request waits in a
//                    loading state, others keep stepping.
//   every step:      for (auto& r : tiers->poll_completions()): take
//                    r.records.size() pool blocks cached under their hashes
//                    (KvCacheManager::import_blocks), KvStorage::write_block
//                    each record's payload into them, leave them free and
//                    cached (release_imported), and admit the request as a
//                    prefix hit of RAM + tier blocks (counted in
//                    cached_tokens). A pool too full to take them, or zero
//                    records: admit it as a plain miss. A request cancelled
//                    meanwhile: drop its completion.
//   metrics:         tiers->stats() per tier, for /metrics (`up` per tier;
//                    /health stays 200 when a tier is down).
//   shutdown:        tiers->flush(timeout) so a clean restart finds the writes.
//
// What the runner provides: KvStorage::read_block(BlockId, span<byte>) and
// write_block(BlockId, span<const byte>) (runner/kv_storage.h), one block's
// K and V for every layer row, bytes_per_block() long. The copy out runs on
// the step thread (a memcpy of one block, 352 KiB for TinyLlama F16), the
// I/O after it does not.
//
// Several KV groups (Gemma-2) are refused for now (Engine's constructor).
// Supporting them: each group keeps its own copy of a block, so each would
// be its own record, keyed hash_for_group(h, g) with parent
// hash_for_group(p, g), bytes read from that group's block id; a lookup is
// then one chain per group (lookups check each record's parent against the
// previous hash of the list they were given).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/strong_id.h"
#include "kvstore/disk_store.h"
#include "kvstore/io_worker.h"
#include "kvstore/kv_store.h"
#include "kvstore/redis_store.h"

namespace kvlm {

struct TierStackConfig {
  std::optional<DiskStoreConfig> disk;    // --kv-disk DIR [--kv-disk-size BYTES]
  std::optional<RedisStoreConfig> redis;  // --kv-redis URL [--kv-redis-password-file F] [--kv-redis-ttl S]
  size_t max_queued_writes = 4096;        // blocks waiting for the I/O thread
  size_t max_write_batch = 32;            // blocks per store() call (one Redis pipeline)
  size_t payload_bytes = 0;               // KvStorage::bytes_per_block; 0: not checked
  // A hit in a lower tier is copied into the tiers above it, only when the
  // records are authenticated (a tier secret): an unauthenticated Redis
  // record is used but never made to outlive its TTL on disk.
  bool write_back_hits = true;
  // The deadline of a whole lookup, queueing included (--kv-tier-timeout-ms).
  double lookup_timeout_s = 0.25;
  // Whether records carry a MAC (both tiers share one TierSecurity).
  bool authenticated() const {
    return (disk && disk->security.authenticated()) || (redis && redis->security.authenticated());
  }
};

// Counters of the stack itself; per-tier counters are in `tiers`.
struct TierStackStats {
  std::vector<TierStats> tiers;    // in lookup order
  int64_t num_queued_writes = 0;   // now
  int64_t num_dropped_full = 0;    // writes dropped: queue full
  int64_t num_dropped_duplicate = 0;
  int64_t num_lookups = 0;
  int64_t num_lookup_blocks = 0;
  int64_t num_hit_blocks = 0;      // blocks handed to the engine
  int64_t num_rejected = 0;        // records refused by the stack: wrong parent, tokens, salt or size
};

class TierStack {
 public:
  // Opens the configured tiers; throws Error for a bad configuration (an
  // unusable directory, a bad URL, an unreadable password file). A Redis
  // server that is down is not an error: it is a miss until it comes back.
  static std::unique_ptr<TierStack> open(const TierStackConfig& config);
  // From ready stores, in lookup order (tests).
  TierStack(std::vector<std::unique_ptr<KvStore>> tiers, const TierStackConfig& config);
  ~TierStack();  // stops the I/O thread; unflushed writes are dropped

  // Queues one full block for every tier. Copies `tokens` and `bytes`, so the
  // pool block may change as soon as this returns. False if dropped (already
  // queued, or the queue is full).
  bool enqueue_store(const BlockHash& hash, std::optional<BlockHash> parent, std::span<const int32_t> tokens,
                     std::span<const std::byte> bytes, uint64_t salt = 0);
  // Asks the tiers for `hashes` (the blocks after a RAM hit whose last block
  // hash is `parent`, under cache salt key `salt`); tokens holds their ids,
  // block after block. The answer comes through poll_completions(), by
  // lookup_timeout_s from now (what the tiers had by then).
  void begin_lookup(RequestId request, std::optional<BlockHash> parent, std::span<const BlockHash> hashes,
                    std::span<const int32_t> tokens, uint64_t salt = 0);
  // The records of `result` went into the pool: counts them as hits of the
  // tiers they came from (kvlm_kv_tier_hit_blocks_total counts only these).
  void note_used(const TierLookupResult& result);
  double lookup_timeout_s() const { return config_.lookup_timeout_s; }
  // Finished lookups; never blocks.
  std::vector<TierLookupResult> poll_completions() { return worker_->poll_completions(); }
  // Waits up to timeout_s for queued writes; true if all were written (or dropped by a tier).
  bool flush(double timeout_s) { return worker_->flush(timeout_s); }

  TierStackStats stats() const;
  size_t num_tiers() const { return tiers_.size(); }
  KvStore& tier(size_t i) { return *tiers_[i]; }

 private:
  TierLookupResult lookup(TierLookup& lookup);
  void store_batch(std::vector<KvRecord>& batch);
  void write_back();
  // How many of `records` (loaded from tier `tier` for hashes[first...]) continue the chain.
  size_t num_valid(const TierLookup& lookup, size_t tier, size_t first, const std::vector<KvRecord>& records);

  std::vector<std::unique_ptr<KvStore>> tiers_;
  TierStackConfig config_;
  std::atomic<int64_t> num_lookups_{0}, num_lookup_blocks_{0}, num_hit_blocks_{0}, num_rejected_{0};
  // Per tier position: blocks used by the engine, and refused by the stack.
  std::array<std::atomic<int64_t>, 2> num_used_{}, num_refused_foreign_{};
  RateLimitedLog warn_{"stack"};
  // Lower-tier hits of the last lookup, by the tier they came from; touched
  // only on the I/O thread.
  std::vector<std::vector<KvRecord>> write_back_;
  std::unique_ptr<IoWorker> worker_;  // last: its thread uses everything above
};

}  // namespace kvlm
