// Per-request block tables over the shared BlockPool, prefix-cache lookups,
// and (for models with sliding-window layers) release of blocks that fell out
// of the window. The only place that does block arithmetic
// (docs/ARCHITECTURE.md).
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
//
// KV budgets (kv_policy.h): a request may hold at most budget + one block of
// tokens. Its slots then stop being its token positions: its n resident
// tokens fill slots 0..n-1 (in token order with --kv-shift; without it a
// compaction may reorder them, see kv_eviction.cpp), and new tokens are
// appended after them. When its resident tokens reach budget + block_size
// (its newest block has just filled), its policy names block_size tokens to
// drop; whole blocks leave the table, single tokens are compacted away by
// slot moves, and blocks shared with the prefix cache or another request are
// copied first. The byte work is queued as KvOps (take_ops()) for the runner.
// Budgets need a model with one KV group.
#pragma once

#include <array>
#include <climits>
#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "common/strong_id.h"
#include "kv/block_hash.h"
#include "kv/block_table.h"
#include "kv/block_pool.h"
#include "kv/kv_chunks.h"
#include "kv/kv_ops.h"
#include "kv/kv_policy.h"

namespace kvlm {

struct KvCacheConfig {
  int32_t num_blocks = 0;
  int32_t block_size = 16;
  bool enable_prefix_caching = true;
  std::vector<int32_t> group_windows = {0};  // one per group; 0 = full attention
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

// A block that on_computed just made full and cached (KV tiers copy it out).
struct PublishedBlock {
  BlockId block;
  BlockHash hash;                   // chain hash (group 0's key)
  std::optional<BlockHash> parent;  // nullopt for a chain's first block
  std::vector<int32_t> tokens;      // its block_size token ids
  uint64_t salt = 0;                // the extra_key it was hashed with (a request's cache_salt key)
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
  // max_hit_tokens caps the hit (a budgeted request may not skip past its
  // first eviction point).
  PrefixHit find_prefix(std::span<const int32_t> tokens, uint64_t extra_key = 0,
                        int32_t max_hit_tokens = INT32_MAX);

  // Feasibility and mutation in a pair (docs/CONTRIBUTING.md): can the request, which has
  // num_computed tokens in its table (or `hit` if it is new), grow to hold
  // num_computed + num_new tokens?
  bool can_allocate(RequestId id, int32_t num_new, const PrefixHit* hit = nullptr) const;
  // Takes the hit's blocks (if any) and allocates the rest. Returns false and
  // changes nothing if the pool is short. A non-empty `hit` must come from
  // find_prefix with no pool change in between, for a request without blocks.
  // `budget` (validated) applies to a new request; ignored for one with blocks.
  bool allocate(RequestId id, int32_t num_new, const PrefixHit* hit = nullptr, const KvBudget& budget = {});

  // After a step: the request has num_computed tokens computed. Publishes its
  // newly full blocks to the prefix cache (tokens = all its tokens so far) and
  // releases window-group blocks no future query can see.
  // A budgeted request that reaches budget + block_size resident tokens sheds
  // block_size of them here. Returns false if that needed a block copy the
  // pool could not give: the caller must preempt the request (its replay
  // reaches the same state).
  [[nodiscard]] bool on_computed(RequestId id, std::span<const int32_t> tokens, int32_t num_computed,
                                 uint64_t extra_key = 0);

  // Speculative decoding: the request's slots past num_computed (verified
  // proposals that were rejected) are given back, so its tables hold what
  // they would had it computed only num_computed tokens: trailing blocks no
  // slot < num_computed uses are freed (last first; never full, so never
  // cached). Call after on_computed() with the same count. Requests without
  // a budget only (a budget's policy has seen no rejected slot either: the
  // scheduler does not speculate under budgets).
  void rollback(RequestId id, int32_t num_computed_tokens);

  // Budgets. Tokens a request may compute in its next step before its policy
  // must run (unbounded: INT32_MAX); for a request without blocks, after `hit`.
  int32_t max_new_tokens(RequestId id, const KvBudget& budget, const PrefixHit* hit = nullptr) const;
  // The most a budgeted request's prefix hit may cover (INT32_MAX unbounded;
  // 0 when its policy needs statistics from every query).
  int32_t max_hit_tokens(const KvBudget& budget) const;
  // Resident (slot) count and tokens dropped so far.
  int32_t num_resident(RequestId id) const;
  int32_t num_evicted(RequestId id) const;
  // Statistics for the request's policy (no-op without one): attention rows
  // (kv_policy.h) and predictive entropies of its slots.
  void observe_attention(RequestId id, int32_t first_query_slot, int64_t first_query_token, int32_t num_rows,
                         int32_t num_context, std::span<const float> weights);
  void observe_entropy(RequestId id, int32_t slot, float entropy);
  void observe_tokens(RequestId id, int32_t first_slot, std::span<const int32_t> tokens);
  // The byte work queued by evictions since the last call, in order.
  KvOps take_ops();

  // KV tiers (single-group models). With recording on, on_computed lists each
  // block it caches; take_published() hands the list over.
  void record_published(bool on) { record_published_ = on; }
  std::vector<PublishedBlock> take_published();
  // A tier load: pool blocks for `hashes`, cached under them and referenced
  // once, so the caller can write their bytes; nullopt if the pool is short.
  // release_imported() then leaves them free and cached, as a finished
  // request's blocks are, for the request's prefix lookup to take.
  // `contents` (empty, or one per hash) go into the KV events.
  std::optional<std::vector<BlockId>> import_blocks(std::span<const BlockHash> hashes,
                                                    std::span<const BlockContent> contents = {});
  void release_imported(std::span<const BlockId> blocks);
  int64_t num_evicted_tokens(KvPolicyKind kind) const { return num_evicted_tokens_[static_cast<size_t>(kind)]; }
  // KV events (block_pool.h): what entered and left the prefix cache; with
  // contents, what each stored block of group 0 holds.
  void record_kv_events(bool on, bool with_contents = false) { pool_.record_events(on, with_contents); }
  std::vector<KvEvent> take_kv_events() { return pool_.take_events(); }
  // Forgets every cached block (BlockPool::reset_prefix_cache); false while
  // any request holds blocks.
  bool reset_prefix_cache() { return requests_.empty() && pool_.reset_prefix_cache(); }
  // Forgets the cached blocks of one chain (chain hashes, group 0's keys:
  // one KV group) that no request holds, as reset_prefix_cache forgets all;
  // returns how many. A held block stays: its request may publish after it.
  int32_t forget_cached(std::span<const BlockHash> hashes);

  // KV chunks (kv_chunks.h; one KV group, no budget). How many full blocks
  // of a chunk prompt, from its first, the pool holds cached under
  // chunk_key (kv_chunk_extra_key of the request's extra_key).
  int32_t num_cached_chunk_blocks(std::span<const int32_t> chunk_prompt, uint64_t chunk_key) const;
  // Admits a new request whose prompt (`tokens`) holds `chunks`: takes `hit`
  // and allocates the rest of the prompt at once. For each chunk after the
  // hit, the cached blocks of its chunk prompt (`chunk_prefix` then its
  // tokens) are copied into the request's slots, each key re-rotated to its
  // new position (KvOps, queued: take_ops()); those blocks stay referenced
  // until release_borrowed(). The prompt's last token is never copied (its
  // logits start the generation). Blocks from the first copied position on
  // are never published to the prefix cache (their KV is not the prompt's
  // exact KV). nullopt, and nothing changed, when the pool is short.
  // `fresh` (empty, or one per chunk): chunks computed for this request
  // (BlendPlan::reused 2, not counted as hits).
  std::optional<BlendPlan> allocate_blend(RequestId id, std::span<const int32_t> tokens, const PrefixHit& hit,
                                          std::span<const KvChunk> chunks, std::span<const int32_t> chunk_prefix,
                                          uint64_t extra_key, std::span<const uint8_t> fresh = {});
  // Drops the references allocate_blend took on chunk blocks: call once the
  // step that ran its copies is over (Scheduler::update).
  void release_borrowed();

  // Releases all of a request's blocks (finished, aborted or preempted), its
  // last block first so cached blocks are evicted newest-first.
  void free(RequestId id);

  bool has_request(RequestId id) const { return requests_.count(id) != 0; }
  const BlockTable& table(RequestId id, int32_t group) const;
  // What the request's table for `group` did since the last call (for the
  // runner's copy, BlockTableMirror); marks it sent.
  BlockTableChange take_table_change(RequestId id, int32_t group);

  // Statistics, in tokens, over the lookups of admitted requests (each
  // admission counts, including re-admission after a preemption).
  int64_t num_prefix_query_tokens() const { return num_prefix_query_tokens_; }
  int64_t num_prefix_hit_tokens() const { return num_prefix_hit_tokens_; }

 private:
  struct RequestBlocks {
    std::vector<BlockTable> tables;       // [num_groups]
    int32_t num_computed = 0;             // resident slots, as of the last allocate (hit) / on_computed
    int32_t num_slots = 0;                // slots the tables have room for
    std::vector<BlockHash> block_hashes;  // chain hashes of its full blocks, published in every group
    KvBudget budget;                      // disabled: unbounded
    std::unique_ptr<KvPolicy> policy;     // set iff budget.enabled()
    int32_t num_evicted = 0;              // tokens dropped (then nothing more is published)
    int32_t num_publishable_blocks = INT32_MAX;  // a blend's blocks from its first copied slot on stay private
  };
  // The cached blocks of a chunk prompt under chunk_key, from its first to the first miss.
  std::vector<BlockId> cached_chunk_blocks(std::span<const int32_t> chunk_prompt, uint64_t chunk_key) const;
  // kv_eviction.cpp: sheds block_size tokens of a request at its budget.
  bool evict(RequestBlocks& r);
  bool evict_run(RequestBlocks& r, int32_t first_slot);
  // The bookkeeping after an eviction: new slot i holds old slot from[i].
  void finish_eviction(RequestBlocks& r, std::span<const int32_t> from, int32_t num_dropped);
  void drop_whole_blocks(RequestBlocks& r, std::vector<bool>& dropped, std::vector<int32_t>& old_slot);
  bool make_private(BlockTable& t, size_t index);
  int32_t blocks_needed(const RequestBlocks* r, int32_t group, int32_t num_tokens) const;
  // Leading blocks of a window group that no query at slot >= num_computed sees.
  int32_t num_invisible_blocks(int32_t group, int32_t num_computed) const;

  KvCacheConfig config_;
  BlockPool pool_;
  std::unordered_map<RequestId, RequestBlocks> requests_;
  int64_t num_prefix_query_tokens_ = 0;
  int64_t num_prefix_hit_tokens_ = 0;
  KvOps ops_;
  bool record_published_ = false;
  std::vector<PublishedBlock> published_;
  std::array<int64_t, kNumKvPolicyKinds> num_evicted_tokens_{};
  std::vector<BlockId> borrowed_;  // chunk blocks the next step's copies read (allocate_blend)
};

}  // namespace kvlm
