#include "kvstore/io_worker.h"

#include <chrono>

namespace kvlm {

IoWorker::IoWorker(size_t max_queued_writes, size_t max_batch, StoreFn store, LookupFn lookup,
                   AfterLookupFn after_lookup)
    : max_queued_writes_(max_queued_writes),
      max_batch_(max_batch == 0 ? 1 : max_batch),
      store_(std::move(store)),
      lookup_(std::move(lookup)),
      after_lookup_(std::move(after_lookup)),
      thread_([this] { run(); }) {}

IoWorker::~IoWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

IoWorker::Enqueued IoWorker::enqueue_store(KvRecord record) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queued_hashes_.count(record.hash)) {
      num_dropped_duplicate_.fetch_add(1, std::memory_order_relaxed);
      return Enqueued::kDuplicate;
    }
    if (writes_.size() >= max_queued_writes_) {
      num_dropped_full_.fetch_add(1, std::memory_order_relaxed);
      return Enqueued::kFull;
    }
    queued_hashes_.insert(record.hash);
    writes_.push_back(std::move(record));
  }
  wake_.notify_one();
  return Enqueued::kQueued;
}

void IoWorker::enqueue_lookup(TierLookup lookup) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    lookups_.push_back(std::move(lookup));
  }
  wake_.notify_one();
}

std::vector<TierLookupResult> IoWorker::poll_completions() {
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock() || completions_.empty()) return {};
  std::vector<TierLookupResult> out;
  out.swap(completions_);
  return out;
}

bool IoWorker::flush(double timeout_s) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_.wait_for(lock, std::chrono::duration<double>(timeout_s),
                        [this] { return writes_.empty() && !writing_; });
}

size_t IoWorker::num_queued_writes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return writes_.size();
}

void IoWorker::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    wake_.wait(lock, [this] { return stop_ || !lookups_.empty() || !writes_.empty(); });
    if (stop_) return;
    if (!lookups_.empty()) {
      TierLookup lookup = std::move(lookups_.front());
      lookups_.pop_front();
      lock.unlock();
      TierLookupResult result = lookup_(lookup);
      lock.lock();
      completions_.push_back(std::move(result));
      if (after_lookup_) {
        lock.unlock();
        after_lookup_();
        lock.lock();
      }
      continue;
    }
    std::vector<KvRecord> batch;
    while (!writes_.empty() && batch.size() < max_batch_) {
      batch.push_back(std::move(writes_.front()));
      writes_.pop_front();
    }
    writing_ = true;
    lock.unlock();
    store_(batch);
    lock.lock();
    writing_ = false;
    for (const auto& r : batch) queued_hashes_.erase(r.hash);
    if (writes_.empty()) idle_.notify_all();
  }
}

}  // namespace kvlm
