#include "engine/kv_event_log.h"

#include <unordered_map>

namespace kvlm {

KvEventLog::KvEventLog(size_t max_batches, bool keep_events)
    : max_batches_(std::max<size_t>(max_batches, 1)), keep_events_(keep_events) {}

void KvEventLog::append(std::vector<KvEvent> events) {
  if (events.empty()) return;
  {
    std::lock_guard lock(mu_);
    KvEventBatch batch;
    batch.seq = ++last_seq_;
    // The step's net effect: a hash may leave and come back (or the other
    // way) within one step; the batch says only where it ended, so readers
    // can apply `stored` and `removed` in any order.
    std::unordered_map<BlockHash, bool> last;  // hash -> held at the end
    std::vector<BlockHash> touched;
    for (const KvEvent& e : events) {
      const bool held = e.kind == KvEvent::Kind::kStored;
      if (held) {
        held_.insert(e.hash);
      } else {
        held_.erase(e.hash);
      }
      if (last.insert_or_assign(e.hash, held).second) touched.push_back(e.hash);
    }
    for (const BlockHash& h : touched) (last.at(h) ? batch.stored : batch.removed).push_back(h);
    if (keep_events_) batch.events = std::move(events);
    batches_.push_back(std::move(batch));
    if (batches_.size() > max_batches_) batches_.pop_front();
  }
  cv_.notify_all();
}

KvEventLog::Snapshot KvEventLog::snapshot() const {
  std::lock_guard lock(mu_);
  Snapshot s;
  s.seq = last_seq_;
  s.hashes.assign(held_.begin(), held_.end());
  return s;
}

std::optional<std::vector<KvEventBatch>> KvEventLog::read_after(uint64_t after,
                                                                 std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  if (after > last_seq_) return std::nullopt;
  cv_.wait_for(lock, timeout, [&] { return closed_ || last_seq_ > after; });
  std::vector<KvEventBatch> out;
  if (last_seq_ == after) return out;
  // The batches kept are seq last_seq_ - size + 1 .. last_seq_.
  const uint64_t first_kept = last_seq_ - batches_.size() + 1;
  if (after + 1 < first_kept) return std::nullopt;
  for (size_t i = static_cast<size_t>(after + 1 - first_kept); i < batches_.size(); ++i) out.push_back(batches_[i]);
  return out;
}

void KvEventLog::close() {
  {
    std::lock_guard lock(mu_);
    closed_ = true;
  }
  cv_.notify_all();
}

bool KvEventLog::closed() const {
  std::lock_guard lock(mu_);
  return closed_;
}

}  // namespace kvlm
