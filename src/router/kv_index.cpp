#include "router/kv_index.h"

namespace kvlm::router {

void WorkerKvIndex::reset(std::vector<BlockHash> hashes, uint64_t seq) {
  held_.clear();
  held_.insert(hashes.begin(), hashes.end());
  for (const BlockHash& h : hashes) pending_.erase(h);
  seq_ = seq;
}

bool WorkerKvIndex::apply(uint64_t seq, std::span<const BlockHash> stored, std::span<const BlockHash> removed) {
  if (!seq_ || seq != *seq_ + 1) return false;
  // A batch is a step's net effect (engine/kv_event_log.h): disjoint lists.
  for (const BlockHash& h : stored) {
    held_.insert(h);
    pending_.erase(h);
  }
  for (const BlockHash& h : removed) {
    held_.erase(h);
    pending_.erase(h);  // computed and already dropped again
  }
  seq_ = seq;
  return true;
}

void WorkerKvIndex::clear() {
  held_.clear();
  pending_.clear();
  seq_.reset();
}

int32_t WorkerKvIndex::num_leading(std::span<const BlockHash> chain, Clock::time_point now) const {
  int32_t n = 0;
  for (const BlockHash& h : chain) {
    if (!held_.count(h)) {
      const auto it = pending_.find(h);
      if (it == pending_.end() || it->second <= now) break;
    }
    ++n;
  }
  return n;
}

void WorkerKvIndex::add_pending(std::span<const BlockHash> chain, Clock::time_point now, Clock::duration ttl) {
  // Expired entries go first, so the map stays the size of what is in flight.
  for (auto it = pending_.begin(); it != pending_.end();) it = it->second <= now ? pending_.erase(it) : std::next(it);
  for (const BlockHash& h : chain)
    if (!held_.count(h)) pending_[h] = now + ttl;
}

void SharedTierIndex::add(const std::string& ns, std::span<const BlockHash> hashes, std::chrono::seconds ttl,
                          Clock::time_point now) {
  for (const BlockHash& h : hashes) {
    Key k{ns, h};
    auto [it, inserted] = expiry_.insert_or_assign(k, now + ttl);
    if (inserted) order_.push_back(std::move(k));
  }
  // Over the cap: the oldest insertions go (their entries may have been
  // refreshed since; the cap is about memory, not accuracy).
  while (expiry_.size() > max_entries_ && order_start_ < order_.size()) expiry_.erase(order_[order_start_++]);
  if (order_start_ > order_.size() / 2) {
    order_.erase(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(order_start_));
    order_start_ = 0;
  }
}

int32_t SharedTierIndex::num_following(const std::string& ns, std::span<const BlockHash> chain, size_t skip,
                                       Clock::time_point now) const {
  int32_t n = 0;
  for (size_t i = skip; i < chain.size(); ++i) {
    const auto it = expiry_.find(Key{ns, chain[i]});
    if (it == expiry_.end() || it->second <= now) break;
    ++n;
  }
  return n;
}

}  // namespace kvlm::router
