#include "engine/tier_loader.h"

#include <algorithm>

#include "common/clock.h"
#include "kv/block_hash.h"
#include "kv/kv_cache_manager.h"
#include "runner/kv_storage.h"
#include "sched/request.h"

namespace kvlm {
namespace {

// The I/O thread answers with what it has at the lookup's deadline; the
// engine waits this much longer for that answer before it stops waiting.
constexpr double kTierAnswerGraceS = 0.01;

}  // namespace

TierLoader::TierLoader(std::unique_ptr<TierStack> tiers, size_t block_bytes)
    : tiers_(std::move(tiers)), block_bytes_(block_bytes) {}
TierLoader::~TierLoader() = default;
TierLoader::TierLoader(TierLoader&&) noexcept = default;
TierLoader& TierLoader::operator=(TierLoader&&) noexcept = default;

bool TierLoader::begin_lookup(std::unique_ptr<Request>& request, KvCacheManager& kv) {
  if (!tiers_ || request->computes_whole_prompt()) return false;
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
  deadlines_.emplace_back(steady_clock().now_s() + tiers_->lookup_timeout_s() + kTierAnswerGraceS, id);
  return true;
}

std::vector<std::unique_ptr<Request>> TierLoader::take_ready(KvCacheManager& kv, KvStorage& storage) {
  std::vector<std::unique_ptr<Request>> ready;
  if (!tiers_) return ready;
  for (TierLookupResult& result : tiers_->poll_completions()) {
    auto it = loading_.find(result.request);
    if (it == loading_.end()) continue;  // cancelled while it loaded
    std::unique_ptr<Request> request = std::move(it->second);
    loading_.erase(it);
    std::vector<BlockHash> hashes;
    std::vector<BlockContent> contents;  // views into the records, for the KV events
    for (const KvRecord& r : result.records) {
      hashes.push_back(r.hash);
      contents.push_back({r.parent, r.tokens, r.salt});
    }
    // A pool too full to take the blocks: the load is a miss, the prompt is computed.
    if (auto ids = hashes.empty() ? std::nullopt : kv.import_blocks(hashes, contents)) {
      for (size_t i = 0; i < ids->size(); ++i) storage.write_block((*ids)[i], result.records[i].payload);
      kv.release_imported(*ids);
      tiers_->note_used(result);
      num_hit_tokens_ += static_cast<int64_t>(ids->size()) * kv.block_size();
    }
    ready.push_back(std::move(request));
  }
  const double now = steady_clock().now_s();
  while (!deadlines_.empty() && deadlines_.front().first <= now) {
    auto it = loading_.find(deadlines_.front().second);
    deadlines_.pop_front();
    if (it == loading_.end()) continue;  // answered (or cancelled) in time
    ready.push_back(std::move(it->second));
    loading_.erase(it);
    ++num_lookups_timed_out_;
  }
  return ready;
}

void TierLoader::store_published(KvCacheManager& kv, const KvStorage& storage) {
  std::vector<PublishedBlock> blocks = kv.take_published();
  if (!tiers_ || blocks.empty()) return;
  for (const PublishedBlock& b : blocks) {
    storage.read_block(b.block, block_bytes_);
    if (!tiers_->enqueue_store(b.hash, b.parent, b.tokens, block_bytes_, b.salt)) ++num_writes_dropped_;
  }
  num_writes_queued_ += static_cast<int64_t>(blocks.size());
}

void TierLoader::clear() {
  loading_.clear();
  deadlines_.clear();
}

bool TierLoader::flush(double timeout_s) { return !tiers_ || tiers_->flush(timeout_s); }

int64_t TierLoader::num_loading_tokens() const {
  int64_t n = 0;
  for (const auto& [id, r] : loading_) n += r->num_tokens();
  return n;
}

std::vector<TierStats> TierLoader::tier_stats() const {
  if (!tiers_) return {};
  return tiers_->stats().tiers;
}

}  // namespace kvlm
