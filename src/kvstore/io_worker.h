// The tier I/O thread (docs/ARCHITECTURE.md "Threads"): the engine thread hands it
// writes and lookups and never waits for it.
//
//  - Writes: a bounded queue of records. A record whose hash is already
//    queued is dropped (duplicate); when the queue is full the new record is
//    dropped (counted): a tier is a cache, and blocking the step thread to
//    save a block would cost more than recomputing it later.
//  - Lookups: a queue the thread serves before writes (a lookup holds a
//    request in its loading state; a write delays nobody), so a lookup waits
//    at most for the one write batch in progress. Results wait in a
//    completion list that the engine takes with poll_completions(), which
//    only try-locks: if the I/O thread holds the lock this instant, the
//    completions come at the next step.
//
// The handlers run on the I/O thread, one call at a time.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <vector>

#include "common/strong_id.h"
#include "kvstore/deadline.h"
#include "kvstore/record.h"

namespace kvlm {

// A lookup: the blocks following a request's RAM prefix hit.
struct TierLookup {
  RequestId request;
  std::optional<BlockHash> parent;  // hash of the block before hashes[0] (nullopt: none)
  std::vector<BlockHash> hashes;    // chain hashes, in order
  std::vector<int32_t> tokens;      // [hashes.size() * block_size] the blocks' token ids
  uint64_t salt = 0;                // the request's cache_salt key (kv/block_hash.h)
  double begin_s = 0;               // when begin_lookup was called (steady clock)
  Deadline deadline;                // begin_s + the lookup timeout: all of it, queueing included
};

// Its answer: the records of the longest contiguous prefix of `hashes` some
// tier holds, every one validated (namespace, hash, checksum or MAC, parent
// chain, tokens, salt, payload size). Empty on a miss or any failure.
struct TierLookupResult {
  RequestId request;
  std::vector<KvRecord> records;
  int32_t num_from_tier[2] = {0, 0};  // by tier position (0: first tier, usually disk)
  double latency_s = 0;               // begin_lookup to completion
};

class IoWorker {
 public:
  using StoreFn = std::function<void(std::vector<KvRecord>& batch)>;
  using LookupFn = std::function<TierLookupResult(TierLookup& lookup)>;
  // Runs after a lookup's result was handed over (work that must not delay
  // the answer, such as copying a Redis hit to disk).
  using AfterLookupFn = std::function<void()>;

  IoWorker(size_t max_queued_writes, size_t max_batch, StoreFn store, LookupFn lookup,
           AfterLookupFn after_lookup = {});
  // Stops the thread; writes still queued are dropped (call flush() first).
  ~IoWorker();
  IoWorker(const IoWorker&) = delete;
  IoWorker& operator=(const IoWorker&) = delete;

  enum class Enqueued { kQueued, kDuplicate, kFull };
  Enqueued enqueue_store(KvRecord record);
  void enqueue_lookup(TierLookup lookup);
  // Finished lookups, oldest first; never blocks.
  std::vector<TierLookupResult> poll_completions();
  // Waits until every queued write is done or `timeout_s` passes; true if done.
  bool flush(double timeout_s);

  size_t num_queued_writes() const;
  int64_t num_dropped_full() const { return num_dropped_full_.load(); }
  int64_t num_dropped_duplicate() const { return num_dropped_duplicate_.load(); }

 private:
  void run();

  const size_t max_queued_writes_;
  const size_t max_batch_;
  StoreFn store_;
  LookupFn lookup_;
  AfterLookupFn after_lookup_;
  mutable std::mutex mu_;
  std::condition_variable wake_;     // work arrived or stopping
  std::condition_variable idle_;     // the write queue drained
  std::deque<KvRecord> writes_;
  std::unordered_set<BlockHash> queued_hashes_;  // hashes in writes_ or being written
  std::deque<TierLookup> lookups_;
  std::vector<TierLookupResult> completions_;
  bool writing_ = false;
  bool stop_ = false;
  std::atomic<int64_t> num_dropped_full_{0}, num_dropped_duplicate_{0};
  std::thread thread_;  // last: starts after every member above exists
};

}  // namespace kvlm
