// KvCacheManager's part of KV chunks (kv_chunks.h): finding a chunk's
// cached blocks and copying them into a request's slots.
#include <algorithm>

#include "common/assert.h"
#include "kv/kv_cache_manager.h"

namespace kvlm {

std::vector<BlockId> KvCacheManager::cached_chunk_blocks(std::span<const int32_t> chunk_prompt,
                                                         uint64_t chunk_key) const {
  std::vector<BlockId> blocks;
  if (!pool_.prefix_caching()) return blocks;
  const auto bs = static_cast<size_t>(config_.block_size);
  std::optional<BlockHash> parent;
  for (size_t i = 0; (i + 1) * bs <= chunk_prompt.size(); ++i) {
    const BlockHash h = hash_block(parent, chunk_prompt.subspan(i * bs, bs), chunk_key);
    const std::optional<BlockId> id = pool_.find_cached(hash_for_group(h, 0));
    if (!id) break;
    blocks.push_back(*id);
    parent = h;
  }
  return blocks;
}

int32_t KvCacheManager::num_cached_chunk_blocks(std::span<const int32_t> chunk_prompt, uint64_t chunk_key) const {
  return static_cast<int32_t>(cached_chunk_blocks(chunk_prompt, chunk_key).size());
}

namespace {

// One slot to copy: from a chunk block's slot to a prompt position.
struct ChunkSlotCopy {
  int32_t position = 0;
  BlockId src_block;
  int32_t src_offset = 0;
  int32_t delta = 0;  // new position - the position it was computed at
};

}  // namespace

std::optional<BlendPlan> KvCacheManager::allocate_blend(RequestId id, std::span<const int32_t> tokens,
                                                        const PrefixHit& hit, std::span<const KvChunk> chunks,
                                                        std::span<const int32_t> chunk_prefix, uint64_t extra_key,
                                                        std::span<const uint8_t> fresh) {
  KVLM_ASSERT(num_groups() == 1, "KV chunks need one KV group");
  KVLM_ASSERT(!requests_.count(id), "allocate_blend for a request with blocks");
  const int32_t bs = config_.block_size;
  const auto n = static_cast<int32_t>(tokens.size());
  const auto num_prefix = static_cast<int32_t>(chunk_prefix.size());
  BlendPlan plan;
  plan.begin = hit.num_tokens;
  const auto size = static_cast<size_t>(n - plan.begin);
  plan.reused.assign(size, 0);
  plan.compute.assign(size, 1);
  plan.deviation.assign(size, 0.f);
  std::vector<ChunkSlotCopy> copies;
  std::vector<BlockId> borrowed;
  const uint64_t chunk_key = kv_chunk_extra_key(extra_key);
  for (size_t k = 0; k < chunks.size(); ++k) {
    const KvChunk& c = chunks[k];
    const bool computed_for_it = k < fresh.size() && fresh[k];
    if (c.begin < plan.begin || c.end > n || c.begin >= c.end) continue;  // inside the hit: already exact
    ++plan.num_chunks;
    const std::vector<int32_t> prompt = kv_chunk_prompt(chunk_prefix, tokens.subspan(c.begin, c.end - c.begin), bs);
    const std::vector<BlockId> blocks = cached_chunk_blocks(prompt, chunk_key);
    if (blocks.empty()) continue;
    if (!computed_for_it) ++plan.num_chunks_hit;
    borrowed.insert(borrowed.end(), blocks.begin(), blocks.end());
    for (int32_t j = num_prefix; j < static_cast<int32_t>(blocks.size()) * bs; ++j) {
      const int32_t pos = c.begin + j - num_prefix;
      if (pos >= n - 1) break;  // the last prompt token is computed: its logits are needed
      copies.push_back({pos, blocks[static_cast<size_t>(j / bs)], j % bs, pos - j});
      plan.reused[static_cast<size_t>(pos - plan.begin)] = computed_for_it ? 2 : 1;
      plan.compute[static_cast<size_t>(pos - plan.begin)] = 0;
    }
  }
  // Referenced before the request's blocks are allocated, so that none of
  // them is handed out (and overwritten) as one of the request's.
  pool_.touch(borrowed);
  if (!allocate(id, n - plan.begin, &hit)) {
    std::reverse(borrowed.begin(), borrowed.end());
    pool_.free(borrowed);
    return std::nullopt;
  }
  borrowed_.insert(borrowed_.end(), borrowed.begin(), borrowed.end());
  RequestBlocks& r = requests_.at(id);
  const BlockTable& t = r.tables[0];
  for (const ChunkSlotCopy& c : copies) {
    const int64_t dst = static_cast<int64_t>(t[static_cast<size_t>(c.position / bs)].value()) * bs + c.position % bs;
    ops_.push_back(KvOp::move_slot(0, static_cast<int64_t>(c.src_block.value()) * bs + c.src_offset, dst));
    if (c.delta != 0) ops_.push_back(KvOp::rotate_key(0, dst, c.delta));
  }
  plan.num_reused = static_cast<int32_t>(copies.size());
  for (const ChunkSlotCopy& c : copies) r.num_publishable_blocks = std::min(r.num_publishable_blocks, c.position / bs);
  return plan;
}

void KvCacheManager::release_borrowed() {
  std::reverse(borrowed_.begin(), borrowed_.end());
  pool_.free(borrowed_);
  borrowed_.clear();
}

}  // namespace kvlm
