// KvCacheManager's half for KV budgets: when a budgeted request sheds tokens,
// which blocks leave its table, which slots move, which keys re-rotate, and
// which shared blocks are copied first (kv_cache_manager.h).
#include <algorithm>

#include "common/assert.h"
#include "kv/kv_cache_manager.h"

namespace kvlm {
namespace {

int32_t rounded_budget(const KvBudget& b, int32_t block_size) {
  return (b.budget_tokens + block_size - 1) / block_size * block_size;
}

int64_t physical_slot(const BlockTable& t, int32_t slot, int32_t block_size) {
  return static_cast<int64_t>(t[static_cast<size_t>(slot / block_size)].value()) * block_size +
         slot % block_size;
}

// Where each survivor goes. With --kv-shift positions are slots, so order is
// kept and every token after a hole moves down. Without it, keys carry their
// own rotation, every resident token is visible to every new query, and
// policies judge recency by token age, so the holes below the new end are
// filled from the survivors past it: at most one move per dropped token.
std::vector<int32_t> compaction_order(const std::vector<bool>& dropped, bool keep_order) {
  const auto n = static_cast<int32_t>(dropped.size());
  std::vector<int32_t> keep;
  for (int32_t j = 0; j < n; ++j)
    if (!dropped[j]) keep.push_back(j);
  if (keep_order) return keep;
  const auto m = static_cast<int32_t>(keep.size());
  std::vector<int32_t> sources;
  for (int32_t j = m; j < n; ++j)
    if (!dropped[j]) sources.push_back(j);
  size_t next = 0;
  for (int32_t i = 0; i < m; ++i) keep[i] = dropped[i] ? sources[next++] : i;
  return keep;
}

}  // namespace

int32_t KvCacheManager::max_new_tokens(RequestId id, const KvBudget& budget, const PrefixHit* hit) const {
  if (!budget.enabled()) return INT32_MAX;
  auto it = requests_.find(id);
  const int32_t num_resident = it != requests_.end() ? it->second.num_computed : (hit ? hit->num_tokens : 0);
  // Stop exactly where the policy fires, so that point never depends on how
  // the scheduler chunked the sequence.
  return std::max(1, rounded_budget(budget, config_.block_size) + config_.block_size - num_resident);
}

int32_t KvCacheManager::max_hit_tokens(const KvBudget& budget) const {
  if (!budget.enabled()) return INT32_MAX;
  // Cached tokens come without the attention or logits their queries made.
  if (kv_policy_needs_attention(budget.policy) || kv_policy_needs_entropy(budget.policy)) return 0;
  return rounded_budget(budget, config_.block_size);
}

int32_t KvCacheManager::num_resident(RequestId id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? 0 : it->second.num_computed;
}

int32_t KvCacheManager::num_evicted(RequestId id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? 0 : it->second.num_evicted;
}

void KvCacheManager::observe_attention(RequestId id, int32_t first_query_slot, int64_t first_query_token,
                                       int32_t num_rows, int32_t num_context, std::span<const float> weights) {
  auto it = requests_.find(id);
  if (it == requests_.end() || !it->second.policy) return;
  KVLM_ASSERT(weights.size() >= static_cast<size_t>(num_rows) * num_context, "attention rows too short");
  it->second.policy->grow_to(first_query_slot + num_rows);
  it->second.policy->observe_attention(first_query_slot, first_query_token, num_rows, num_context, weights);
}

void KvCacheManager::observe_entropy(RequestId id, int32_t slot, float entropy) {
  auto it = requests_.find(id);
  if (it == requests_.end() || !it->second.policy) return;
  it->second.policy->grow_to(slot + 1);
  it->second.policy->observe_entropy(slot, entropy);
}

void KvCacheManager::observe_tokens(RequestId id, int32_t first_slot, std::span<const int32_t> tokens) {
  auto it = requests_.find(id);
  if (it == requests_.end() || !it->second.policy) return;
  it->second.policy->grow_to(first_slot + static_cast<int32_t>(tokens.size()));
  it->second.policy->observe_tokens(first_slot, tokens);
}

KvOps KvCacheManager::take_ops() {
  KvOps out;
  out.swap(ops_);
  return out;
}

bool KvCacheManager::make_private(BlockTable& t, size_t index) {
  const BlockId b = t[index];
  const BlockMeta& m = pool_.meta(b);
  if (m.ref_count == 1 && !m.hash) return true;
  if (pool_.can_allocate(1)) {
    // Copy-on-write: the shared or cached original stays as it is.
    const BlockId copy = pool_.allocate(1)[0];
    ops_.push_back(KvOp::copy_block(0, b.value(), copy.value()));
    const BlockId old[] = {b};
    pool_.free(old);
    t.set(index, copy);
    return true;
  }
  if (m.ref_count == 1) {  // only the prefix cache shares it: forget it instead
    pool_.uncache(b);
    return true;
  }
  return false;
}

// Step 1 of an eviction: blocks whose every slot goes leave the table with no
// data moved. old_slot[j] = the original slot now at slot j; dropped is
// rewritten over the remaining slots.
void KvCacheManager::drop_whole_blocks(RequestBlocks& r, std::vector<bool>& dropped, std::vector<int32_t>& old_slot) {
  const int32_t bs = config_.block_size;
  const auto n = static_cast<int32_t>(dropped.size());
  BlockTable& t = r.tables[0];
  std::vector<BlockId> kept_blocks, gone;
  std::vector<bool> kept_dropped;
  for (size_t k = 0; k < t.size(); ++k) {
    const int32_t begin = static_cast<int32_t>(k) * bs, end = std::min(begin + bs, n);
    bool all = end - begin == bs;
    for (int32_t s = begin; s < end && all; ++s) all = dropped[s];
    if (all) {
      gone.push_back(t[k]);
      continue;
    }
    kept_blocks.push_back(t[k]);
    for (int32_t s = begin; s < end; ++s) {
      old_slot.push_back(s);
      kept_dropped.push_back(dropped[s]);
    }
  }
  pool_.free(gone);
  t.assign(std::move(kept_blocks));
  dropped = std::move(kept_dropped);
}

// A contiguous run [a, a + bs) that straddles two blocks (sinks): every token
// after it keeps its offset and moves one table entry down, so block ka + 1
// takes the a % bs tokens before the run from block ka, which then leaves the
// table. a % bs slot moves instead of one per token after the run.
bool KvCacheManager::evict_run(RequestBlocks& r, int32_t a) {
  const int32_t bs = config_.block_size;
  BlockTable& t = r.tables[0];
  const auto ka = static_cast<size_t>(a / bs);
  if (!make_private(t, ka + 1)) return false;
  for (int32_t o = 0; o < a % bs; ++o)
    ops_.push_back(KvOp::move_slot(0, physical_slot(t, static_cast<int32_t>(ka) * bs + o, bs),
                                   physical_slot(t, static_cast<int32_t>(ka + 1) * bs + o, bs)));
  const BlockId gone[] = {t[ka]};
  t.erase(ka);
  pool_.free(gone);
  if (r.budget.shift) {
    // Tokens from a on are bs positions earlier (those moved into block ka
    // before a keep theirs).
    for (size_t k = ka; k < t.size(); ++k)
      if (!make_private(t, k)) return false;
    for (int32_t i = a; i < r.num_computed - bs; ++i) ops_.push_back(KvOp::rotate_key(0, physical_slot(t, i, bs), -bs));
  }
  return true;
}

bool KvCacheManager::evict(RequestBlocks& r) {
  const int32_t bs = config_.block_size;
  const int32_t n = r.num_computed;
  BlockTable& t = r.tables[0];
  KVLM_ASSERT(num_groups() == 1 && t.num_released == 0, "budgets need one full-attention group");
  const std::vector<int32_t> victims = r.policy->choose(bs);
  if (victims.back() - victims.front() == bs - 1 && victims.front() % bs != 0 && n % bs == 0) {
    if (!evict_run(r, victims.front())) return false;
    std::vector<int32_t> from;
    for (int32_t s = 0; s < n; ++s)
      if (s < victims.front() || s > victims.back()) from.push_back(s);
    finish_eviction(r, from, bs);
    return true;
  }
  std::vector<bool> dropped(static_cast<size_t>(n), false);
  for (int32_t s : victims) {
    KVLM_ASSERT(s >= 0 && s < n && !dropped[s], "a policy named a slot twice or out of range");
    dropped[s] = true;
  }
  std::vector<int32_t> old_slot;
  drop_whole_blocks(r, dropped, old_slot);

  // Step 2: compact the survivors. keep[i] = the slot whose token ends at i.
  const std::vector<int32_t> keep = compaction_order(dropped, r.budget.shift);
  const auto num_kept = static_cast<int32_t>(keep.size());
  // A block is written when a slot moves into it, or (with --kv-shift) when
  // one of its keys changes position.
  std::vector<bool> written(t.size(), false);
  for (int32_t i = 0; i < num_kept; ++i) {
    if (keep[i] != i || (r.budget.shift && old_slot[keep[i]] != i)) written[static_cast<size_t>(i / bs)] = true;
  }
  for (size_t k = 0; k < written.size(); ++k)
    if (written[k] && !make_private(t, k)) return false;
  for (int32_t i = 0; i < num_kept; ++i)
    if (keep[i] != i) ops_.push_back(KvOp::move_slot(0, physical_slot(t, keep[i], bs), physical_slot(t, i, bs)));
  if (r.budget.shift) {
    // Positions are slots: a token now at slot i had position old_slot[keep[i]].
    for (int32_t i = 0; i < num_kept; ++i) {
      const int32_t delta = i - old_slot[keep[i]];
      if (delta != 0) ops_.push_back(KvOp::rotate_key(0, physical_slot(t, i, bs), delta));
    }
  }

  // Step 3: blocks emptied by the compaction go back, newest first.
  const auto num_blocks = static_cast<size_t>((num_kept + bs - 1) / bs);
  std::vector<BlockId> tail(t.blocks().rbegin(), t.blocks().rend() - static_cast<std::ptrdiff_t>(num_blocks));
  pool_.free(tail);
  t.truncate(num_blocks);
  std::vector<int32_t> from(keep.size());
  for (size_t i = 0; i < keep.size(); ++i) from[i] = old_slot[static_cast<size_t>(keep[i])];
  finish_eviction(r, from, bs);
  return true;
}

void KvCacheManager::finish_eviction(RequestBlocks& r, std::span<const int32_t> from, int32_t num_dropped) {
  const auto num_kept = static_cast<int32_t>(from.size());
  r.num_computed = num_kept;
  r.num_slots = num_kept;
  r.num_evicted += num_dropped;
  r.policy->on_compact(from);
  num_evicted_tokens_[static_cast<size_t>(r.budget.policy)] += num_dropped;
}

}  // namespace kvlm
