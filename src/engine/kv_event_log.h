// KV events for a router (docs/router.md): which block hashes enter and
// leave this engine's prefix cache, numbered so a reader notices a gap, and
// a snapshot of every hash held for a reader that starts or falls behind.
//
// The engine thread appends one batch per step (KvCacheManager's events);
// any number of HTTP threads read. The log keeps its own copy of the set of
// held hashes, built from the events, so a snapshot never touches the
// engine's (single-threaded) pool.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_set>
#include <vector>

#include "kv/block_pool.h"

namespace kvlm {

// One step's changes, as their net effect: `stored` were held at the end of
// the step, `removed` were not (disjoint; apply in any order). seq counts
// batches from 1, without gaps.
// `events` are the step's events themselves, in order, with their blocks'
// contents: kept only by a log made with keep_events (the ZMQ publisher
// needs them; the HTTP stream does not).
struct KvEventBatch {
  uint64_t seq = 0;
  std::vector<BlockHash> stored;
  std::vector<BlockHash> removed;
  std::vector<KvEvent> events;
};

class KvEventLog {
 public:
  // Keeps the last `max_batches` batches for readers that are behind.
  explicit KvEventLog(size_t max_batches = 4096, bool keep_events = false);

  // Engine thread: one batch of events, in order (nothing for an empty list).
  void append(std::vector<KvEvent> events);

  struct Snapshot {
    uint64_t seq = 0;                // the last batch it includes
    std::vector<BlockHash> hashes;   // every hash held after that batch
  };
  Snapshot snapshot() const;

  // The batches after `after`, waiting up to `timeout` for one (empty: none
  // came). nullopt when batches after `after` have left the log (or `after`
  // is ahead of it): the reader must start again from a snapshot.
  std::optional<std::vector<KvEventBatch>> read_after(uint64_t after, std::chrono::milliseconds timeout) const;

  // Wakes every waiting reader (shutdown).
  void close();
  bool closed() const;

 private:
  const size_t max_batches_;
  const bool keep_events_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::deque<KvEventBatch> batches_;          // the newest max_batches_
  uint64_t last_seq_ = 0;
  std::unordered_set<BlockHash> held_;
  bool closed_ = false;
};

}  // namespace kvlm
