// One tier behind the RAM pool (docs/ARCHITECTURE.md "Tiers"): the interface the disk
// and Redis backends share, and the counters each keeps.
//
// Contract for every backend: no call throws or blocks without bound on a
// tier failure (I/O error, full disk, server down, timeout, corrupt bytes);
// a failure is a miss (or an unwritten record) plus a counter. Records come
// back validated for namespace, block hash and checksum (record.h); the
// caller (TierStack) checks the chain and the tokens.
//
// Backends are used by one thread at a time in the engine (the I/O thread),
// but each guards its state with a mutex so tools and tests may share one.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kv/block_hash.h"
#include "kvstore/deadline.h"
#include "kvstore/record.h"

namespace kvlm {

// Upper bounds (seconds) of the load-latency buckets; the last bucket is +Inf.
inline constexpr std::array<double, 10> kTierLatencyBoundsS = {0.0001, 0.0003, 0.001, 0.003, 0.01,
                                                               0.03,   0.1,    0.3,   1.0,   3.0};

// Why a tier's answer was not used, for kvlm_kv_tier_refused_total{reason}.
enum class TierRefusal {
  kBadMac,     // a MAC or AEAD tag that does not verify, or an unauthenticated record where a secret is set
  kCorrupt,    // a record that does not parse, or whose checksum fails
  kForeign,    // another namespace or block, or (stack) other tokens, parent, salt or size
  kWrongType,  // Redis: a reply that is not a string (WRONGTYPE, an integer, an array)
  kOversize,   // Redis: a reply longer than the largest legal record, or an array larger than asked
  kTimeout,    // the lookup's deadline passed
};
inline constexpr size_t kNumTierRefusals = 6;
const char* tier_refusal_name(TierRefusal r);  // "bad_mac", "corrupt", ...
TierRefusal refusal_of(RecordStatus s);        // for a status other than kOk

// A snapshot of one tier's counters: plain data the engine exports to /metrics.
struct TierStats {
  std::string name;                  // "disk", "redis"
  bool up = true;                    // false while the tier is unreachable (circuit open)
  int64_t num_lookups = 0;           // probe/load calls
  int64_t num_lookup_blocks = 0;     // blocks asked for
  int64_t num_hit_blocks = 0;        // blocks returned valid
  int64_t num_blocks_written = 0;
  int64_t num_blocks_dropped = 0;    // writes not done (too large, no space, tier down, OOM)
  int64_t num_bytes_read = 0;
  int64_t num_bytes_written = 0;
  int64_t num_errors = 0;            // I/O or protocol errors, timeouts
  int64_t num_corrupt = 0;           // records refused by decode_record (disk: removed)
  std::array<int64_t, kNumTierRefusals> num_refused{};  // by TierRefusal
  int64_t num_evicted = 0;           // disk: records removed to keep to the size cap
  int64_t num_records = 0;           // disk: records held now
  int64_t num_bytes_held = 0;        // disk: bytes held now
  std::array<int64_t, kTierLatencyBoundsS.size() + 1> load_latency_buckets{};  // per bucket, not cumulative
  double load_latency_sum_s = 0;
};

// Thread-safe counters behind TierStats (relaxed atomics: statistics only).
class TierCounters {
 public:
  std::atomic<int64_t> num_lookups{0}, num_lookup_blocks{0}, num_hit_blocks{0}, num_blocks_written{0},
      num_blocks_dropped{0}, num_bytes_read{0}, num_bytes_written{0}, num_errors{0}, num_corrupt{0},
      num_evicted{0};
  void observe_load_latency(double seconds);
  void refuse(TierRefusal why, int64_t n = 1) {
    num_refused_[static_cast<size_t>(why)].fetch_add(n, std::memory_order_relaxed);
  }
  // Fills every field of `out` but name, up, num_records and num_bytes_held.
  void snapshot(TierStats& out) const;

 private:
  std::array<std::atomic<int64_t>, kTierLatencyBoundsS.size() + 1> buckets_{};
  std::array<std::atomic<int64_t>, kNumTierRefusals> num_refused_{};
  std::atomic<int64_t> latency_sum_ns_{0};
};

class KvStore {
 public:
  virtual ~KvStore() = default;
  virtual std::string_view name() const = 0;
  // How many of `hashes`, from the first, the tier holds (stops at the first
  // absent one: a chain is only useful as a prefix). A hint: load may still miss.
  virtual size_t probe(std::span<const BlockHash> hashes) = 0;
  // The records of the longest prefix of `hashes` the tier holds and that
  // decode as exactly those blocks of this namespace, as far as the tier got
  // before `deadline`.
  virtual std::vector<KvRecord> load(std::span<const BlockHash> hashes, const Deadline& deadline) = 0;
  std::vector<KvRecord> load(std::span<const BlockHash> hashes) { return load(hashes, Deadline::none()); }
  // Writes the records not yet held; returns how many the tier now holds
  // newly. Records already present are left (and count as held).
  virtual size_t store(std::span<const KvRecord> records) = 0;
  virtual TierStats stats() const = 0;
};

}  // namespace kvlm
