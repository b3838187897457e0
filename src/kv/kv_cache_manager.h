// Per-request block tables over the shared BlockPool, prefix-cache lookups,
// and (for models with sliding-window layers) release of blocks that fell out
// of the window. The only place that does block arithmetic (DESIGN.md).
//
// KV groups: layers that share block tables. Most models have one group;
// Gemma-2 has a full-attention group and a sliding-window group. Every group
// draws blocks from the one pool; a window group keeps only the blocks its
// window can still see.
//
// Prefix caching works across groups (vLLM v1's hybrid allocator): each group
// caches its own copy of a full block under hash_for_group(chain hash, g). A
// hit of n blocks needs all n cached in every full-attention group, but only
// the blocks still inside the window of the first new query in a window
// group; the window group's older entries start out released.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "common/strong_id.h"
#include "kv/block_hash.h"
#include "kv/block_pool.h"

namespace kvlm {

struct KvCacheConfig {
  int32_t num_blocks = 0;
  int32_t block_size = 16;
  bool enable_prefix_caching = true;
  std::vector<int32_t> group_windows = {0};  // one per group; 0 = full attention
};

// A request's table for one group. Entries [0, num_released) were released
// (window groups only): their ids are stale and must not be read.
struct BlockTable {
  std::vector<BlockId> blocks;
  int32_t num_released = 0;
};

// Result of a prefix-cache lookup: the first num_tokens tokens (a whole
// number of blocks) are already in the cache. tables[g] is group g's table
// for them (entries [0, num_released) stale, as in any window table); empty
// tables when there is no hit.
struct PrefixHit {
  int32_t num_tokens = 0;
  std::vector<BlockTable> tables;  // [num_groups] when num_tokens > 0
  std::vector<BlockHash> hashes;   // chain hashes of the hit blocks
  int32_t num_query_tokens = 0;    // tokens looked up (for the hit-rate statistics)
};

class KvCacheManager {
 public:
  explicit KvCacheManager(KvCacheConfig config);

  int32_t block_size() const { return config_.block_size; }
  int32_t num_groups() const { return static_cast<int32_t>(config_.group_windows.size()); }
  bool prefix_caching() const { return pool_.prefix_caching(); }
  const BlockPool& pool() const { return pool_; }
  // Blocks one request of num_tokens tokens needs across all groups, when alone.
  int32_t num_blocks_for(int32_t num_tokens) const;

  // Longest run of cached full blocks at the start of `tokens`, leaving at
  // least one token to compute (its logits are needed). The statistics count
  // the lookup when allocate() admits the request with it, so a request
  // retried every step while the pool is short counts once.
  PrefixHit find_prefix(std::span<const int32_t> tokens, uint64_t extra_key = 0);

  // Feasibility and mutation in a pair (STYLE.md): can the request, which has
  // num_computed tokens in its table (or `hit` if it is new), grow to hold
  // num_computed + num_new tokens?
  bool can_allocate(RequestId id, int32_t num_new, const PrefixHit* hit = nullptr) const;
  // Takes the hit's blocks (if any) and allocates the rest. Returns false and
  // changes nothing if the pool is short. A non-empty `hit` must come from
  // find_prefix with no pool change in between, for a request without blocks.
  bool allocate(RequestId id, int32_t num_new, const PrefixHit* hit = nullptr);

  // After a step: the request has num_computed tokens computed. Publishes its
  // newly full blocks to the prefix cache (tokens = all its tokens so far) and
  // releases window-group blocks no future query can see.
  void on_computed(RequestId id, std::span<const int32_t> tokens, int32_t num_computed,
                   uint64_t extra_key = 0);

  // Releases all of a request's blocks (finished, aborted or preempted), its
  // last block first so cached blocks are evicted newest-first.
  void free(RequestId id);

  bool has_request(RequestId id) const { return requests_.count(id) != 0; }
  const BlockTable& table(RequestId id, int32_t group) const;

  // Statistics, in tokens, over the lookups of admitted requests (each
  // admission counts, including re-admission after a preemption).
  int64_t num_prefix_query_tokens() const { return num_prefix_query_tokens_; }
  int64_t num_prefix_hit_tokens() const { return num_prefix_hit_tokens_; }

 private:
  struct RequestBlocks {
    std::vector<BlockTable> tables;       // [num_groups]
    int32_t num_computed = 0;             // as of the last allocate (hit) / on_computed
    int32_t num_slots = 0;                // tokens the tables have room for
    std::vector<BlockHash> block_hashes;  // chain hashes of its full blocks, published in every group
  };
  int32_t blocks_needed(const RequestBlocks* r, int32_t group, int32_t num_tokens) const;
  // Leading blocks of a window group that no query at slot >= num_computed sees.
  int32_t num_invisible_blocks(int32_t group, int32_t num_computed) const;

  KvCacheConfig config_;
  BlockPool pool_;
  std::unordered_map<RequestId, RequestBlocks> requests_;
  int64_t num_prefix_query_tokens_ = 0;
  int64_t num_prefix_hit_tokens_ = 0;
};

}  // namespace kvlm
