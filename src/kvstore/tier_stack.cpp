#include "kvstore/tier_stack.h"

#include <algorithm>

#include "common/assert.h"
#include "common/clock.h"

namespace kvlm {

std::unique_ptr<TierStack> TierStack::open(const TierStackConfig& config) {
  std::vector<std::unique_ptr<KvStore>> tiers;
  if (config.disk) tiers.push_back(DiskStore::open(*config.disk));
  if (config.redis) tiers.push_back(RedisStore::open(*config.redis));
  return std::make_unique<TierStack>(std::move(tiers), config);
}

TierStack::TierStack(std::vector<std::unique_ptr<KvStore>> tiers, const TierStackConfig& config)
    : tiers_(std::move(tiers)), config_(config), write_back_(tiers_.size()) {
  KVLM_ASSERT(tiers_.size() <= 2, "at most two tiers (disk, Redis)");
  worker_ = std::make_unique<IoWorker>(
      config_.max_queued_writes, config_.max_write_batch,
      [this](std::vector<KvRecord>& batch) { store_batch(batch); },
      [this](TierLookup& l) { return lookup(l); }, [this] { write_back(); });
}

TierStack::~TierStack() { worker_.reset(); }  // join before the tiers go

bool TierStack::enqueue_store(const BlockHash& hash, std::optional<BlockHash> parent,
                              std::span<const int32_t> tokens, std::span<const std::byte> bytes, uint64_t salt) {
  if (tiers_.empty()) return false;
  KvRecord r;
  r.hash = hash;
  r.parent = parent;
  r.salt = salt;
  r.tokens.assign(tokens.begin(), tokens.end());
  r.payload.assign(bytes.begin(), bytes.end());
  return worker_->enqueue_store(std::move(r)) == IoWorker::Enqueued::kQueued;
}

void TierStack::begin_lookup(RequestId request, std::optional<BlockHash> parent, std::span<const BlockHash> hashes,
                             std::span<const int32_t> tokens, uint64_t salt) {
  KVLM_ASSERT(hashes.empty() || tokens.size() % hashes.size() == 0, "tokens must be whole blocks");
  TierLookup l;
  l.request = request;
  l.parent = parent;
  l.hashes.assign(hashes.begin(), hashes.end());
  l.tokens.assign(tokens.begin(), tokens.end());
  l.salt = salt;
  l.begin_s = steady_clock().now_s();
  l.deadline = Deadline{l.begin_s + config_.lookup_timeout_s};
  worker_->enqueue_lookup(std::move(l));
}

void TierStack::note_used(const TierLookupResult& result) {
  for (size_t t = 0; t < num_used_.size(); ++t) num_used_[t].fetch_add(result.num_from_tier[t], std::memory_order_relaxed);
}

size_t TierStack::num_valid(const TierLookup& l, size_t tier, size_t first, const std::vector<KvRecord>& records) {
  const size_t block_size = l.hashes.empty() ? 0 : l.tokens.size() / l.hashes.size();
  // Formats 2 and 3 carry the salt under their MAC; format 1 carries none.
  const bool check_salt = config_.authenticated();
  size_t n = 0;
  for (; n < records.size(); ++n) {
    const size_t i = first + n;
    const KvRecord& r = records[n];
    const std::optional<BlockHash> parent = i == 0 ? l.parent : std::optional<BlockHash>(l.hashes[i - 1]);
    const bool tokens_ok =
        r.tokens.size() == block_size &&
        std::equal(r.tokens.begin(), r.tokens.end(), l.tokens.begin() + static_cast<std::ptrdiff_t>(i * block_size));
    const bool size_ok = config_.payload_bytes == 0 || r.payload.size() == config_.payload_bytes;
    const bool salt_ok = !check_salt || r.salt == l.salt;
    if (r.hash != l.hashes[i] || r.parent != parent || !tokens_ok || !size_ok || !salt_ok) {
      // A hash collision, a writer with another layout, or a record replayed
      // from another prompt or salt: never loaded.
      num_rejected_.fetch_add(1, std::memory_order_relaxed);
      num_refused_foreign_[std::min<size_t>(tier, 1)].fetch_add(1, std::memory_order_relaxed);
      warn_.warn("refusing block {} of a lookup: {}", i,
                 !tokens_ok ? "other tokens" : !size_ok ? "other payload size" : !salt_ok ? "other salt" : "other parent");
      break;
    }
  }
  return n;
}

TierLookupResult TierStack::lookup(TierLookup& l) {
  TierLookupResult out;
  out.request = l.request;
  num_lookups_.fetch_add(1, std::memory_order_relaxed);
  num_lookup_blocks_.fetch_add(static_cast<int64_t>(l.hashes.size()), std::memory_order_relaxed);
  for (size_t t = 0; t < tiers_.size() && out.records.size() < l.hashes.size(); ++t) {
    const size_t first = out.records.size();
    std::vector<KvRecord> got = tiers_[t]->load(std::span(l.hashes).subspan(first), l.deadline);
    got.resize(num_valid(l, t, first, got));
    out.num_from_tier[std::min<size_t>(t, 1)] += static_cast<int32_t>(got.size());
    // Only what a MAC vouches for outlives the lower tier in the one above.
    if (config_.write_back_hits && config_.authenticated() && t > 0) write_back_[t] = got;
    for (auto& r : got) out.records.push_back(std::move(r));
  }
  num_hit_blocks_.fetch_add(static_cast<int64_t>(out.records.size()), std::memory_order_relaxed);
  out.latency_s = steady_clock().now_s() - l.begin_s;
  return out;
}

void TierStack::write_back() {
  // Lower-tier hits go to the tiers above (a Redis hit lands on disk), after
  // the answer went out.
  for (size_t t = 1; t < write_back_.size(); ++t) {
    for (size_t above = 0; above < t && !write_back_[t].empty(); ++above) tiers_[above]->store(write_back_[t]);
    write_back_[t].clear();
  }
}

void TierStack::store_batch(std::vector<KvRecord>& batch) {
  for (auto& t : tiers_) t->store(batch);
}

TierStackStats TierStack::stats() const {
  TierStackStats s;
  for (size_t t = 0; t < tiers_.size(); ++t) {
    TierStats ts = tiers_[t]->stats();
    // A tier's hits are the blocks the engine used; the stack's refusals are its too.
    ts.num_hit_blocks = num_used_[std::min<size_t>(t, 1)].load(std::memory_order_relaxed);
    ts.num_refused[static_cast<size_t>(TierRefusal::kForeign)] += num_refused_foreign_[std::min<size_t>(t, 1)].load();
    s.tiers.push_back(std::move(ts));
  }
  s.num_queued_writes = static_cast<int64_t>(worker_->num_queued_writes());
  s.num_dropped_full = worker_->num_dropped_full();
  s.num_dropped_duplicate = worker_->num_dropped_duplicate();
  s.num_lookups = num_lookups_.load();
  s.num_lookup_blocks = num_lookup_blocks_.load();
  s.num_hit_blocks = num_hit_blocks_.load();
  s.num_rejected = num_rejected_.load();
  return s;
}

}  // namespace kvlm
