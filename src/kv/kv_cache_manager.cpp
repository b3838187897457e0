#include "kv/kv_cache_manager.h"

#include <algorithm>

#include "common/assert.h"
#include "common/error.h"

namespace kvlm {

namespace {

// KvCacheConfig comes from user flags (--kv-mem, --block-size): bad values are
// errors, not asserts.
KvCacheConfig validated(KvCacheConfig c) {
  if (c.num_blocks <= 0) {
    throw_error(ErrorCode::kInvalidArgument,
                "the KV cache needs at least one block, got {}; give it more memory", c.num_blocks);
  }
  if (c.block_size <= 0) {
    throw_error(ErrorCode::kInvalidArgument, "KV block size must be positive, got {}",
                c.block_size);
  }
  if (c.group_windows.empty()) {
    throw_error(ErrorCode::kInvalidArgument, "a KV cache needs at least one layer group");
  }
  for (int32_t w : c.group_windows) {
    if (w < 0) {
      throw_error(ErrorCode::kInvalidArgument, "sliding window must be >= 0, got {}", w);
    }
  }
  return c;
}

int32_t ceil_div(int32_t a, int32_t b) { return (a + b - 1) / b; }

// A table's blocks that are held (its released, stale entries excluded).
std::span<const BlockId> live_blocks(const BlockTable& t) {
  return std::span<const BlockId>(t.blocks()).subspan(static_cast<size_t>(t.num_released));
}

}  // namespace

KvCacheManager::KvCacheManager(KvCacheConfig config)
    : config_(validated(std::move(config))),
      pool_(config_.num_blocks, config_.enable_prefix_caching) {}

int32_t KvCacheManager::num_invisible_blocks(int32_t group, int32_t num_computed) const {
  int32_t window = config_.group_windows[group];
  if (window == 0) return 0;
  // A query at slot s sees (s - W, s]; the earliest future query is at
  // num_computed, so slots <= num_computed - W are dead. Block b (slots
  // [b*bs, (b+1)*bs)) is dead when (b+1)*bs - 1 <= num_computed - W.
  int32_t num_dead_slots = num_computed - window + 1;
  return num_dead_slots > 0 ? num_dead_slots / config_.block_size : 0;
}

int32_t KvCacheManager::blocks_needed(const RequestBlocks* r, int32_t group,
                                      int32_t num_tokens) const {
  int32_t num_entries = ceil_div(num_tokens, config_.block_size);
  int32_t num_have = r ? static_cast<int32_t>(r->tables[group].size()) : 0;
  // Window tables never lag behind their window: on_computed releases eagerly
  // and every slot written in a step is seen by its own query, so each new
  // entry needs a real block.
  return std::max(0, num_entries - num_have);
}

int32_t KvCacheManager::num_blocks_for(int32_t num_tokens) const {
  // Conservative for window groups: a prompt computed in one step writes
  // every slot before any block can be released.
  int32_t n = 0;
  for (int32_t g = 0; g < num_groups(); ++g) n += blocks_needed(nullptr, g, num_tokens);
  return n;
}

PrefixHit KvCacheManager::find_prefix(std::span<const int32_t> tokens, uint64_t extra_key,
                                      int32_t max_hit_tokens) {
  PrefixHit hit;
  if (!pool_.prefix_caching() || tokens.empty()) return hit;
  hit.num_query_tokens = static_cast<int32_t>(tokens.size());
  const int32_t bs = config_.block_size;
  // At least one token must be computed: its logits start the generation.
  const int32_t max_blocks = std::min((static_cast<int32_t>(tokens.size()) - 1) / bs, max_hit_tokens / bs);
  // cached[g][i]: group g's cached copy of block i. A full group ends the
  // search at its first miss; a window group may miss blocks that a hit
  // leaves out of sight, so the chain goes on past its misses.
  std::vector<std::vector<std::optional<BlockId>>> cached(static_cast<size_t>(num_groups()));
  int32_t limit = max_blocks;
  std::optional<BlockHash> parent;
  for (int32_t i = 0; i < limit; ++i) {
    const BlockHash h = hash_block(parent, tokens.subspan(static_cast<size_t>(i) * bs, bs), extra_key);
    hit.hashes.push_back(h);
    parent = h;
    for (int32_t g = 0; g < num_groups(); ++g) {
      cached[g].push_back(pool_.find_cached(hash_for_group(h, g)));
      if (!cached[g].back() && config_.group_windows[g] == 0) limit = i;  // ends the loop
    }
  }
  // The longest hit every group can serve: for a window group, the blocks the
  // first new query (at slot n * bs) can see must be cached.
  auto serves = [&](int32_t n) {
    for (int32_t g = 0; g < num_groups(); ++g) {
      for (int32_t i = num_invisible_blocks(g, n * bs); i < n; ++i)
        if (!cached[g][i]) return false;
    }
    return true;
  };
  int32_t n = limit;
  while (n > 0 && !serves(n)) --n;
  hit.hashes.resize(static_cast<size_t>(n));
  if (n == 0) return hit;
  hit.num_tokens = n * bs;
  hit.tables.resize(static_cast<size_t>(num_groups()));
  for (int32_t g = 0; g < num_groups(); ++g) {
    BlockTable& t = hit.tables[g];
    t.num_released = num_invisible_blocks(g, n * bs);
    for (int32_t i = 0; i < n; ++i) t.push_back(i < t.num_released ? BlockId(0) : *cached[g][i]);
  }
  return hit;
}

bool KvCacheManager::can_allocate(RequestId id, int32_t num_new, const PrefixHit* hit) const {
  KVLM_ASSERT(num_new >= 0, "negative token count");
  auto it = requests_.find(id);
  int32_t num_needed = 0;
  if (it != requests_.end()) {
    KVLM_ASSERT(hit == nullptr || hit->num_tokens == 0, "a prefix hit for a request with blocks");
    const RequestBlocks& r = it->second;
    for (int32_t g = 0; g < num_groups(); ++g) {
      num_needed += blocks_needed(&r, g, r.num_computed + num_new);
    }
    return pool_.can_allocate(num_needed);
  }
  const int32_t num_hit_tokens = hit ? hit->num_tokens : 0;
  KVLM_ASSERT(num_hit_tokens % config_.block_size == 0, "a prefix hit covers whole blocks");
  KVLM_ASSERT(num_hit_tokens == 0 || pool_.prefix_caching(), "a prefix hit without caching");
  const int32_t num_entries = ceil_div(num_hit_tokens + num_new, config_.block_size);
  for (int32_t g = 0; g < num_groups(); ++g) {
    if (num_hit_tokens == 0) {
      num_needed += num_entries;
      continue;
    }
    const BlockTable& t = hit->tables[g];
    num_needed += num_entries - static_cast<int32_t>(t.size());
    for (BlockId b : live_blocks(t)) {
      // A hit block that is free leaves the free queue when touched.
      if (pool_.meta(b).ref_count == 0) ++num_needed;
    }
  }
  return pool_.can_allocate(num_needed);
}

bool KvCacheManager::allocate(RequestId id, int32_t num_new, const PrefixHit* hit, const KvBudget& budget) {
  if (!can_allocate(id, num_new, hit)) return false;
  auto [it, is_new] = requests_.try_emplace(id);
  RequestBlocks& r = it->second;
  if (is_new) {
    r.tables.resize(static_cast<size_t>(num_groups()));
    if (budget.enabled()) {
      KVLM_ASSERT(num_groups() == 1, "KV budgets need a model with one KV group");
      r.budget = validated_budget(budget, config_.block_size);
      r.policy = make_kv_policy(r.budget, config_.block_size);
    }
    if (hit) {
      num_prefix_query_tokens_ += hit->num_query_tokens;
      num_prefix_hit_tokens_ += hit->num_tokens;
    }
    if (hit && hit->num_tokens > 0) {
      // Touch before allocating: a hit block at the head of the free queue
      // must not be handed out (and its hash forgotten) as a new block.
      r.tables = hit->tables;
      for (const BlockTable& t : r.tables) pool_.touch(live_blocks(t));
      r.num_computed = hit->num_tokens;
      r.num_slots = hit->num_tokens;
      r.block_hashes = hit->hashes;
      if (r.policy) r.policy->grow_to(hit->num_tokens);
    }
  }
  int32_t num_tokens = r.num_computed + num_new;
  for (int32_t g = 0; g < num_groups(); ++g) {
    r.tables[g].append(pool_.allocate(blocks_needed(&r, g, num_tokens)));
  }
  r.num_slots = std::max(r.num_slots, num_tokens);
  return true;
}

bool KvCacheManager::on_computed(RequestId id, std::span<const int32_t> tokens,
                                 int32_t num_computed_tokens, uint64_t extra_key) {
  auto it = requests_.find(id);
  KVLM_ASSERT(it != requests_.end(), "on_computed for a request without blocks");
  RequestBlocks& r = it->second;
  // Slots, not tokens: a request that dropped tokens holds fewer slots.
  const int32_t num_computed = num_computed_tokens - r.num_evicted;
  KVLM_ASSERT(num_computed >= r.num_computed, "num_computed went backwards");
  KVLM_ASSERT(num_computed <= r.num_slots, "computed more tokens than the table has slots for");
  KVLM_ASSERT(static_cast<int32_t>(tokens.size()) >= num_computed, "fewer tokens than computed");
  if (r.policy) r.policy->grow_to(num_computed);
  r.num_computed = num_computed;
  const int32_t bs = config_.block_size;

  // Block i holds tokens [i*bs, (i+1)*bs) only until the first drop.
  if (pool_.prefix_caching() && r.num_evicted == 0) {
    const int32_t num_full = std::min(num_computed / bs, r.num_publishable_blocks);
    for (auto i = static_cast<int32_t>(r.block_hashes.size()); i < num_full; ++i) {
      std::optional<BlockHash> parent;
      if (i > 0) parent = r.block_hashes[i - 1];
      const BlockHash h = hash_block(parent, tokens.subspan(static_cast<size_t>(i) * bs, bs), extra_key);
      // Before any release below: a window block is full before it is out of
      // sight, so every group's copy gets published.
      // Group 0's key is the chain hash itself, so its content names the
      // chain's parent; other groups' keys are not published with contents.
      const auto block_tokens = tokens.subspan(static_cast<size_t>(i) * bs, bs);
      for (int32_t g = 0; g < num_groups(); ++g) {
        const BlockTable& t = r.tables[g];
        std::optional<BlockContent> content;
        if (g == 0) content = BlockContent{parent, block_tokens, extra_key};
        if (i >= t.num_released) pool_.cache(t[i], hash_for_group(h, g), content);
      }
      if (record_published_ && num_groups() == 1 && pool_.meta(r.tables[0][i]).hash == hash_for_group(h, 0)) {
        const auto first = tokens.begin() + static_cast<ptrdiff_t>(i) * bs;
        published_.push_back({r.tables[0][i], h, parent, std::vector<int32_t>(first, first + bs), extra_key});
      }
      r.block_hashes.push_back(h);
    }
  }

  for (int32_t g = 0; g < num_groups(); ++g) {
    BlockTable& t = r.tables[g];
    int32_t num_dead =
        std::min(num_invisible_blocks(g, num_computed), static_cast<int32_t>(t.size()));
    if (num_dead <= t.num_released) continue;
    pool_.free(std::span<const BlockId>(t.blocks()).subspan(t.num_released, num_dead - t.num_released));
    t.num_released = num_dead;
  }
  if (r.policy && r.num_computed >= r.budget.budget_tokens + bs) return evict(r);
  return true;
}

void KvCacheManager::rollback(RequestId id, int32_t num_computed_tokens) {
  auto it = requests_.find(id);
  KVLM_ASSERT(it != requests_.end(), "rollback for a request without blocks");
  RequestBlocks& r = it->second;
  KVLM_ASSERT(!r.policy && r.num_evicted == 0, "rollback under a KV budget");
  KVLM_ASSERT(num_computed_tokens == r.num_computed, "rollback to other than the computed tokens");
  if (r.num_slots <= num_computed_tokens) return;
  const auto num_entries = static_cast<size_t>(ceil_div(num_computed_tokens, config_.block_size));
  for (BlockTable& t : r.tables) {
    if (t.size() <= num_entries) continue;
    const size_t keep = std::max(num_entries, static_cast<size_t>(t.num_released));
    std::vector<BlockId> reversed(t.blocks().rbegin(), t.blocks().rend() - static_cast<std::ptrdiff_t>(keep));
    pool_.free(reversed);
    t.truncate(keep);
  }
  r.num_slots = num_computed_tokens;
}

void KvCacheManager::free(RequestId id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;  // never allocated (e.g. a waiting request)
  std::vector<BlockId> reversed;
  for (const BlockTable& t : it->second.tables) {
    reversed.assign(t.blocks().rbegin(), t.blocks().rend() - t.num_released);
    pool_.free(reversed);
  }
  requests_.erase(it);
}

const BlockTable& KvCacheManager::table(RequestId id, int32_t group) const {
  auto it = requests_.find(id);
  KVLM_ASSERT(it != requests_.end(), "table() of a request without blocks");
  KVLM_ASSERT(group >= 0 && group < num_groups(), "group out of range");
  return it->second.tables[group];
}

BlockTableChange KvCacheManager::take_table_change(RequestId id, int32_t group) {
  auto it = requests_.find(id);
  KVLM_ASSERT(it != requests_.end(), "take_table_change() of a request without blocks");
  KVLM_ASSERT(group >= 0 && group < num_groups(), "group out of range");
  return it->second.tables[group].take_change();
}

std::vector<PublishedBlock> KvCacheManager::take_published() {
  std::vector<PublishedBlock> out;
  out.swap(published_);
  return out;
}

std::optional<std::vector<BlockId>> KvCacheManager::import_blocks(std::span<const BlockHash> hashes,
                                                                  std::span<const BlockContent> contents) {
  KVLM_ASSERT(num_groups() == 1, "tier imports need one KV group");
  KVLM_ASSERT(contents.empty() || contents.size() == hashes.size(), "one content per imported hash");
  if (!pool_.prefix_caching() || !pool_.can_allocate(static_cast<int32_t>(hashes.size()))) return std::nullopt;
  std::vector<BlockId> ids = pool_.allocate(static_cast<int32_t>(hashes.size()));
  // A hash cached meanwhile (another request computed it) keeps its block;
  // this copy stays unhashed and is simply freed again.
  for (size_t i = 0; i < ids.size(); ++i) {
    std::optional<BlockContent> content;
    if (!contents.empty()) content = contents[i];
    pool_.cache(ids[i], hash_for_group(hashes[i], 0), content);
  }
  return ids;
}

int32_t KvCacheManager::forget_cached(std::span<const BlockHash> hashes) {
  KVLM_ASSERT(num_groups() == 1, "forgetting a chain needs one KV group");
  int32_t num_forgotten = 0;
  for (const BlockHash& h : hashes) {
    const std::optional<BlockId> id = pool_.find_cached(hash_for_group(h, 0));
    if (!id || pool_.meta(*id).ref_count > 0) continue;
    pool_.uncache(*id);
    ++num_forgotten;
  }
  return num_forgotten;
}

void KvCacheManager::release_imported(std::span<const BlockId> blocks) {
  // Last block first, as free() does: the chain's tail is evicted before its head.
  std::vector<BlockId> reversed(blocks.rbegin(), blocks.rend());
  pool_.free(reversed);
}

}  // namespace kvlm
