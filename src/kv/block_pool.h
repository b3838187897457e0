// The pool of KV blocks shared by every request (vLLM v1 style, see docs/CONTRIBUTING.md).
//
// Block metadata is plain data in one array indexed by block id. A block with
// reference count 0 sits in the FreeBlockQueue, an intrusive doubly-linked
// LRU list over block indices, so a cached free block can leave the middle of
// the queue in O(1) when a new request hits it. A freed block keeps its
// content and its hash; allocation takes the head of the queue and only then
// forgets the hash (evicting it from the prefix cache).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "common/strong_id.h"
#include "kv/block_hash.h"

namespace kvlm {

struct BlockMeta {
  int32_t ref_count = 0;
  std::optional<BlockHash> hash;      // set once the block is full and cached
  std::optional<BlockId> prev_free;   // links of the free queue (valid while free)
  std::optional<BlockId> next_free;
  bool in_free_queue = false;
};

// Intrusive LRU list of free blocks over BlockPool's metadata array.
// Head = next to be allocated (least recently freed); tail = most recent.
class FreeBlockQueue {
 public:
  explicit FreeBlockQueue(std::vector<BlockMeta>& meta) : meta_(meta) {}
  int32_t size() const { return size_; }
  std::optional<BlockId> head() const { return head_; }
  void push_back(BlockId id);     // precondition: not in the queue
  void remove(BlockId id);        // precondition: in the queue; O(1)
  BlockId pop_front();            // precondition: size() > 0
  std::vector<BlockId> to_vector() const;  // head to tail (tests)

 private:
  std::vector<BlockMeta>& meta_;
  std::optional<BlockId> head_, tail_;
  int32_t size_ = 0;
};

// Hash -> cached block. One block per hash: when two requests compute the
// same block at once the second is simply not cached (it is freed normally).
class PrefixCache {
 public:
  std::optional<BlockId> find(const BlockHash& h) const;
  bool insert(const BlockHash& h, BlockId id);   // false if h is already cached
  void erase(const BlockHash& h, BlockId id);    // only if h maps to id
  size_t size() const { return map_.size(); }
  std::vector<BlockHash> hashes() const;

 private:
  std::unordered_map<BlockHash, BlockId> map_;
};

// What a newly cached block holds, for readers that key blocks by their
// tokens (vLLM's BlockStored over ZMQ, docs/router.md). The caller's views;
// the pool copies them only while it records events with contents.
struct BlockContent {
  std::optional<BlockHash> parent;  // the key of the block before it (nullopt: first of its chain)
  std::span<const int32_t> tokens;  // its block_size token ids
  uint64_t salt = 0;                // the extra_key it was hashed with (a cache_salt's key; 0: none)
};

// A change to what the prefix cache holds, for a router that routes by the
// blocks each server really holds (KvEventLog in engine/, docs/router.md).
struct KvEvent {
  enum class Kind : uint8_t { kStored, kRemoved };
  Kind kind;
  BlockHash hash;  // the cache key: the chain hash for KV group 0
  // A kStored event's content, when recorded with contents and the caller
  // gave it (group 0's blocks): otherwise no parent, no tokens.
  std::optional<BlockHash> parent{};
  std::vector<int32_t> tokens{};  // [block_size], or empty: not known
  uint64_t salt = 0;
  bool operator==(const KvEvent&) const = default;
};

class BlockPool {
 public:
  // All blocks start free, in id order (block 0 is allocated first).
  BlockPool(int32_t num_blocks, bool enable_prefix_caching);
  // The free queue points into meta_, so a copied or moved pool would link
  // into the old one's metadata. Pinned in place (the owner holds it by value).
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  int32_t num_blocks() const { return static_cast<int32_t>(meta_.size()); }
  int32_t num_free_blocks() const { return free_queue_.size(); }
  int32_t num_used_blocks() const { return num_blocks() - num_free_blocks(); }
  bool prefix_caching() const { return enable_prefix_caching_; }

  bool can_allocate(int32_t n) const { return n <= num_free_blocks(); }
  // Takes n blocks from the head of the free queue, ref count 1 each, evicting
  // their old hashes. Precondition: can_allocate(n).
  std::vector<BlockId> allocate(int32_t n);

  // A cached block matching `h`, whether in use or free (nullopt if none).
  std::optional<BlockId> find_cached(const BlockHash& h) const;
  // Takes a reference on each block (a prefix-cache hit): a free block leaves
  // the free queue, keeping its content.
  void touch(std::span<const BlockId> blocks);
  // Drops a reference on each block, in the order given; a block reaching 0
  // joins the tail of the free queue. Callers pass a request's blocks
  // last-first, so its last block is evicted first.
  void free(std::span<const BlockId> blocks);
  // Records that full block `id` holds the tokens hashed by `h`.
  // No-op if prefix caching is off, the block already has a hash, or another
  // block already caches `h`. `content` goes into the stored event (only
  // when events are recorded with contents).
  void cache(BlockId id, const BlockHash& h, const std::optional<BlockContent>& content = std::nullopt);
  // Forgets block `id`'s hash (its content is about to change in place).
  void uncache(BlockId id);
  // Forgets every cached hash (SGLang's /flush_cache, vLLM's
  // reset_prefix_cache), in the free queue's order, each a removed event; the
  // free queue keeps its order. Only when no block is in use: false, and
  // nothing changes, otherwise.
  bool reset_prefix_cache();

  // With recording on, every hash that enters or leaves the prefix cache is
  // listed, in order; take_events() hands the list over. With contents, a
  // stored event also carries the BlockContent its cache() call gave (a copy
  // of the tokens per block: off unless a reader needs them).
  void record_events(bool on, bool with_contents = false) {
    record_events_ = on;
    record_contents_ = on && with_contents;
  }
  std::vector<KvEvent> take_events();
  // Every hash the prefix cache holds now (a snapshot for a new reader of the events).
  std::vector<BlockHash> cached_hashes() const;

  const BlockMeta& meta(BlockId id) const { return meta_[id.value()]; }
  std::vector<BlockId> free_queue_order() const { return free_queue_.to_vector(); }
  size_t num_cached_blocks() const { return prefix_cache_.size(); }
  // Cached blocks whose content was dropped because allocation reused them.
  int64_t num_evicted_cached_blocks() const { return num_evicted_cached_blocks_; }

 private:
  bool enable_prefix_caching_;
  std::vector<BlockMeta> meta_;
  FreeBlockQueue free_queue_;
  PrefixCache prefix_cache_;
  int64_t num_evicted_cached_blocks_ = 0;
  bool record_events_ = false;
  bool record_contents_ = false;
  std::vector<KvEvent> events_;
};

}  // namespace kvlm
