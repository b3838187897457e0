#include "kvstore/kv_store.h"

#include <algorithm>

namespace kvlm {

const char* tier_refusal_name(TierRefusal r) {
  switch (r) {
    case TierRefusal::kBadMac: return "bad_mac";
    case TierRefusal::kCorrupt: return "corrupt";
    case TierRefusal::kForeign: return "foreign";
    case TierRefusal::kWrongType: return "wrong_type";
    case TierRefusal::kOversize: return "oversize";
    case TierRefusal::kTimeout: return "timeout";
  }
  return "?";
}

TierRefusal refusal_of(RecordStatus s) {
  switch (s) {
    case RecordStatus::kBadMac:
    case RecordStatus::kUnauthenticated: return TierRefusal::kBadMac;
    case RecordStatus::kWrongNamespace:
    case RecordStatus::kWrongHash: return TierRefusal::kForeign;
    default: return TierRefusal::kCorrupt;
  }
}

void TierCounters::observe_load_latency(double seconds) {
  auto it = std::lower_bound(kTierLatencyBoundsS.begin(), kTierLatencyBoundsS.end(), seconds);
  buckets_[static_cast<size_t>(it - kTierLatencyBoundsS.begin())].fetch_add(1, std::memory_order_relaxed);
  latency_sum_ns_.fetch_add(static_cast<int64_t>(seconds * 1e9), std::memory_order_relaxed);
}

void TierCounters::snapshot(TierStats& out) const {
  auto ld = [](const std::atomic<int64_t>& a) { return a.load(std::memory_order_relaxed); };
  out.num_lookups = ld(num_lookups);
  out.num_lookup_blocks = ld(num_lookup_blocks);
  out.num_hit_blocks = ld(num_hit_blocks);
  out.num_blocks_written = ld(num_blocks_written);
  out.num_blocks_dropped = ld(num_blocks_dropped);
  out.num_bytes_read = ld(num_bytes_read);
  out.num_bytes_written = ld(num_bytes_written);
  out.num_errors = ld(num_errors);
  out.num_corrupt = ld(num_corrupt);
  out.num_evicted = ld(num_evicted);
  for (size_t i = 0; i < buckets_.size(); ++i) out.load_latency_buckets[i] = ld(buckets_[i]);
  for (size_t i = 0; i < num_refused_.size(); ++i) out.num_refused[i] = ld(num_refused_[i]);
  out.load_latency_sum_s = static_cast<double>(ld(latency_sum_ns_)) * 1e-9;
}

}  // namespace kvlm
