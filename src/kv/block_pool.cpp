#include "kv/block_pool.h"

#include "common/assert.h"

namespace kvlm {

// ---- FreeBlockQueue -------------------------------------------------------

void FreeBlockQueue::push_back(BlockId id) {
  BlockMeta& m = meta_[id.value()];
  KVLM_ASSERT(!m.in_free_queue, "block pushed twice onto the free queue");
  m.prev_free = tail_;
  m.next_free.reset();
  if (tail_) {
    meta_[tail_->value()].next_free = id;
  } else {
    head_ = id;
  }
  tail_ = id;
  m.in_free_queue = true;
  ++size_;
}

void FreeBlockQueue::remove(BlockId id) {
  BlockMeta& m = meta_[id.value()];
  KVLM_ASSERT(m.in_free_queue, "removing a block that is not in the free queue");
  if (m.prev_free) {
    meta_[m.prev_free->value()].next_free = m.next_free;
  } else {
    head_ = m.next_free;
  }
  if (m.next_free) {
    meta_[m.next_free->value()].prev_free = m.prev_free;
  } else {
    tail_ = m.prev_free;
  }
  m.prev_free.reset();
  m.next_free.reset();
  m.in_free_queue = false;
  --size_;
}

BlockId FreeBlockQueue::pop_front() {
  KVLM_ASSERT(head_.has_value(), "pop_front on an empty free queue");
  BlockId id = *head_;
  remove(id);
  return id;
}

std::vector<BlockId> FreeBlockQueue::to_vector() const {
  std::vector<BlockId> out;
  out.reserve(size_);
  for (std::optional<BlockId> cur = head_; cur; cur = meta_[cur->value()].next_free) {
    out.push_back(*cur);
  }
  return out;
}

// ---- PrefixCache ----------------------------------------------------------

std::optional<BlockId> PrefixCache::find(const BlockHash& h) const {
  auto it = map_.find(h);
  if (it == map_.end()) return std::nullopt;
  return it->second;
}

bool PrefixCache::insert(const BlockHash& h, BlockId id) {
  return map_.try_emplace(h, id).second;
}

std::vector<BlockHash> PrefixCache::hashes() const {
  std::vector<BlockHash> out;
  out.reserve(map_.size());
  for (const auto& [h, id] : map_) out.push_back(h);
  return out;
}

void PrefixCache::erase(const BlockHash& h, BlockId id) {
  auto it = map_.find(h);
  if (it != map_.end() && it->second == id) map_.erase(it);
}

// ---- BlockPool ------------------------------------------------------------

namespace {
// Checked before the metadata vector is sized from it.
size_t checked_num_blocks(int32_t num_blocks) {
  KVLM_ASSERT(num_blocks > 0, "a BlockPool needs at least one block");
  return static_cast<size_t>(num_blocks);
}
}  // namespace

BlockPool::BlockPool(int32_t num_blocks, bool enable_prefix_caching)
    : enable_prefix_caching_(enable_prefix_caching),
      meta_(checked_num_blocks(num_blocks)),
      free_queue_(meta_) {
  for (int32_t i = 0; i < num_blocks; ++i) free_queue_.push_back(BlockId(i));
}

std::vector<BlockId> BlockPool::allocate(int32_t n) {
  KVLM_ASSERT(n >= 0 && can_allocate(n), "allocate without can_allocate");
  std::vector<BlockId> out;
  out.reserve(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    BlockId id = free_queue_.pop_front();
    BlockMeta& m = meta_[id.value()];
    KVLM_ASSERT(m.ref_count == 0, "a block in the free queue has references");
    // Reusing the block overwrites its content: only now is the hash gone.
    if (m.hash) {
      prefix_cache_.erase(*m.hash, id);
      if (record_events_) events_.push_back({KvEvent::Kind::kRemoved, *m.hash});
      m.hash.reset();
      ++num_evicted_cached_blocks_;
    }
    m.ref_count = 1;
    out.push_back(id);
  }
  return out;
}

std::optional<BlockId> BlockPool::find_cached(const BlockHash& h) const {
  if (!enable_prefix_caching_) return std::nullopt;
  return prefix_cache_.find(h);
}

void BlockPool::touch(std::span<const BlockId> blocks) {
  for (BlockId id : blocks) {
    BlockMeta& m = meta_[id.value()];
    if (m.in_free_queue) {
      KVLM_ASSERT(m.ref_count == 0, "a block in the free queue has references");
      free_queue_.remove(id);
    }
    ++m.ref_count;
  }
}

void BlockPool::free(std::span<const BlockId> blocks) {
  for (BlockId id : blocks) {
    BlockMeta& m = meta_[id.value()];
    KVLM_ASSERT(m.ref_count > 0, "block freed more times than referenced (double free)");
    if (--m.ref_count == 0) free_queue_.push_back(id);
  }
}

void BlockPool::cache(BlockId id, const BlockHash& h, const std::optional<BlockContent>& content) {
  if (!enable_prefix_caching_) return;
  BlockMeta& m = meta_[id.value()];
  KVLM_ASSERT(m.ref_count > 0, "caching a block nobody holds");
  if (m.hash) return;
  // Two requests may compute the same block at once; the first one wins and
  // the other's copy stays uncached, freed like any other block.
  if (!prefix_cache_.insert(h, id)) return;
  m.hash = h;
  if (!record_events_) return;
  KvEvent e{KvEvent::Kind::kStored, h};
  if (record_contents_ && content) {
    e.parent = content->parent;
    e.tokens.assign(content->tokens.begin(), content->tokens.end());
    e.salt = content->salt;
  }
  events_.push_back(std::move(e));
}

void BlockPool::uncache(BlockId id) {
  BlockMeta& m = meta_[id.value()];
  if (!m.hash) return;
  prefix_cache_.erase(*m.hash, id);
  if (record_events_) events_.push_back({KvEvent::Kind::kRemoved, *m.hash});
  m.hash.reset();
}

bool BlockPool::reset_prefix_cache() {
  if (num_used_blocks() > 0) return false;
  for (BlockId id : free_queue_.to_vector()) uncache(id);
  return true;
}

std::vector<KvEvent> BlockPool::take_events() {
  std::vector<KvEvent> out;
  out.swap(events_);
  return out;
}

std::vector<BlockHash> BlockPool::cached_hashes() const { return prefix_cache_.hashes(); }

}  // namespace kvlm
