// The engine's side of the KV tiers (docs/ARCHITECTURE.md "Tiers", kvstore/tier_stack.h):
// a new request whose prompt runs past its RAM prefix hit waits while the I/O
// thread looks for the following blocks; loaded blocks enter the pool as free
// cached blocks and the request is then admitted as an ordinary prefix hit.
// Newly full blocks are copied out and queued for the tiers. Nothing here
// waits on a tier: lookups and writes are handed over, completions polled,
// and a lookup not answered by its deadline is given up (the request is
// admitted as a miss; its late answer is dropped).
#include <algorithm>

#include "common/clock.h"
#include "common/log.h"
#include "engine/engine.h"
#include "kv/block_hash.h"
#include "kvstore/record_codec.h"
#include "runner/kv_storage.h"
#include "runner/model_runner.h"
#include "sched/scheduler.h"

namespace kvlm {
namespace {

// The I/O thread answers with what it has at the lookup's deadline; the
// engine waits this much longer for that answer before it stops waiting.
constexpr double kTierAnswerGraceS = 0.01;

}  // namespace

std::optional<Hash128> Engine::shared_tier_id() const {
  if (!config_.tiers || !config_.tiers->redis) return std::nullopt;
  return RecordCodec(config_.tiers->redis->ns, config_.tiers->redis->security).tier_id();
}

bool Engine::begin_tier_lookup(std::unique_ptr<Request>& request) {
  if (!tiers_ || request->computes_whole_prompt()) return false;
  KvCacheManager& kv = scheduler_->kv_manager();
  const int32_t bs = kv.block_size();
  // Full blocks of the prompt, leaving one token to compute (its logits start
  // the generation), and no further than a budget lets a hit go.
  const int32_t max_hit = std::min(request->num_tokens() - 1, kv.max_hit_tokens(request->kv_budget));
  const int32_t num_blocks = max_hit / bs;
  const int32_t num_ram = kv.find_prefix(request->tokens, request->cache_salt, max_hit).num_tokens / bs;
  if (num_ram >= num_blocks) return false;
  std::vector<BlockHash> hashes;
  std::optional<BlockHash> parent;
  for (int32_t i = 0; i < num_blocks; ++i) {
    const auto block = std::span<const int32_t>(request->tokens).subspan(static_cast<size_t>(i) * bs, bs);
    parent = hash_block(parent, block, request->cache_salt);
    hashes.push_back(*parent);
  }
  const std::optional<BlockHash> before = num_ram > 0 ? std::optional(hashes[num_ram - 1]) : std::nullopt;
  tiers_->begin_lookup(request->id, before, std::span(hashes).subspan(num_ram),
                       std::span<const int32_t>(request->tokens).subspan(static_cast<size_t>(num_ram) * bs,
                                                                         static_cast<size_t>(num_blocks - num_ram) * bs),
                       request->cache_salt);
  const RequestId id = request->id;
  loading_.emplace(id, std::move(request));
  loading_deadlines_.emplace_back(steady_clock().now_s() + tiers_->lookup_timeout_s() + kTierAnswerGraceS, id);
  return true;
}

void Engine::admit_after_lookup(std::unique_ptr<Request> request) {
  const RequestId id = request->id;
  try {
    scheduler_->add_request(std::move(request));
  } catch (const Error& e) {
    fail_live(id, e);
  }
}

void Engine::expire_tier_lookups() {
  const double now = steady_clock().now_s();
  while (!loading_deadlines_.empty() && loading_deadlines_.front().first <= now) {
    auto it = loading_.find(loading_deadlines_.front().second);
    loading_deadlines_.pop_front();
    if (it == loading_.end()) continue;  // answered (or cancelled) in time
    std::unique_ptr<Request> request = std::move(it->second);
    loading_.erase(it);
    {
      std::lock_guard lock(mu_);
      metrics_.num_tier_lookups_timed_out++;
    }
    admit_after_lookup(std::move(request));
  }
}

void Engine::take_tier_loads() {
  if (!tiers_) return;
  KvCacheManager& kv = scheduler_->kv_manager();
  for (TierLookupResult& result : tiers_->poll_completions()) {
    auto it = loading_.find(result.request);
    if (it == loading_.end()) continue;  // cancelled while it loaded
    std::unique_ptr<Request> request = std::move(it->second);
    loading_.erase(it);
    std::vector<BlockHash> hashes;
    for (const KvRecord& r : result.records) hashes.push_back(r.hash);
    // A pool too full to take the blocks: the load is a miss, the prompt is computed.
    if (auto ids = hashes.empty() ? std::nullopt : kv.import_blocks(hashes)) {
      for (size_t i = 0; i < ids->size(); ++i) runner_->storage().write_block((*ids)[i], result.records[i].payload);
      kv.release_imported(*ids);
      tiers_->note_used(result);
      std::lock_guard lock(mu_);
      metrics_.num_tier_hit_tokens += static_cast<int64_t>(ids->size()) * kv.block_size();
    }
    admit_after_lookup(std::move(request));
  }
  expire_tier_lookups();
}

void Engine::store_published_blocks() {
  std::vector<PublishedBlock> blocks = scheduler_->kv_manager().take_published();
  if (!tiers_ || blocks.empty()) return;
  std::vector<std::byte> bytes(KvStorage::bytes_per_block(*model_, config_.kv_dtype, config_.block_size));
  int64_t num_dropped = 0;
  for (const PublishedBlock& b : blocks) {
    runner_->storage().read_block(b.block, bytes);
    if (!tiers_->enqueue_store(b.hash, b.parent, b.tokens, bytes, b.salt)) ++num_dropped;
  }
  std::lock_guard lock(mu_);
  metrics_.num_tier_writes_queued += static_cast<int64_t>(blocks.size());
  metrics_.num_tier_writes_dropped += num_dropped;
}

}  // namespace kvlm
