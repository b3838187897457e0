#include "runner/kv_prefault.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/huge_pages.h"
#include "common/log.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14 (older headers lack the name)
#endif

namespace kvlm {
namespace {
constexpr uintptr_t kSmallPage = 4096;
// Blocks committed per round (the lock is not held during one): the
// destructor waits for at most one round to end.
constexpr int32_t kMaxRoundBlocks = 1024;
}  // namespace

KvPrefaulter::KvPrefaulter(uint8_t* base, size_t num_regions, size_t block_bytes, int32_t num_blocks)
    : base_(base), num_regions_(num_regions), block_bytes_(block_bytes), num_blocks_(num_blocks) {
  const auto per_page = static_cast<int32_t>(std::max<size_t>(1, kHugePageBytes / std::max<size_t>(1, block_bytes)));
  lookahead_ = std::max(kMinLookaheadBlocks, per_page);
  // The first lookahead here, at the caller's priority: the first request
  // should find it committed, and the thread below runs at the lowest.
  target_ = std::min(num_blocks_, lookahead_);
  if (commit(0, target_)) {
    committed_ = target_;
  } else {
    stopped_ = true;
  }
  thread_ = std::thread([this] { run(); });
}

KvPrefaulter::~KvPrefaulter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void KvPrefaulter::note_use(int32_t block) {
  const int32_t used = std::max(0, block) + 1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Another round once use comes within half a lookahead of the target:
    // rounds of half a lookahead or more, not a block or two every step.
    if (stopped_ || target_ == num_blocks_ || used + lookahead_ / 2 <= target_) return;
    target_ = std::min(num_blocks_, used + lookahead_);
  }
  wake_.notify_one();
}

int32_t KvPrefaulter::target_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return target_;
}

int32_t KvPrefaulter::committed_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return committed_;
}

void KvPrefaulter::wait_committed(int32_t n) const {
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [&] { return committed_ >= std::min(n, num_blocks_) || stopped_; });
}

bool KvPrefaulter::commit(int32_t from, int32_t to) const {
  const size_t region_bytes = block_bytes_ * static_cast<size_t>(num_blocks_);
  for (size_t r = 0; r < num_regions_; ++r) {
    // Whole 4 KiB pages (madvise's unit) covering the blocks; a page shared
    // with a block already committed is simply committed already.
    const auto begin = reinterpret_cast<uintptr_t>(base_ + r * region_bytes + block_bytes_ * static_cast<size_t>(from));
    const auto end = reinterpret_cast<uintptr_t>(base_ + r * region_bytes + block_bytes_ * static_cast<size_t>(to));
    const uintptr_t lo = begin / kSmallPage * kSmallPage;
    const uintptr_t hi = (end + kSmallPage - 1) / kSmallPage * kSmallPage;
    if (::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_POPULATE_WRITE) != 0) {
      log_debug("KV pool prefaulting stops (madvise MADV_POPULATE_WRITE: {}); pages fault in on first use",
                std::strerror(errno));
      return false;
    }
  }
  return true;
}

void KvPrefaulter::run() {
  // The lowest priority (best effort): zeroing pages should take idle time,
  // not a compute thread's core. 8 streams of 400 tokens crossing into new
  // pages, 2 busy cores (bench batch --requests 16 --concurrency 8
  // --gen-len 400): ITL p99 44-48 ms at nice 0, 35-40 at nice 19, 33 without
  // prefaulting; the longest gap 99-157, 124-132 and 187-192 ms.
  ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 19);
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    wake_.wait(lock, [&] { return stopped_ || committed_ < target_; });
    if (stopped_) return;
    const int32_t from = committed_;
    const int32_t to = std::min(target_, from + kMaxRoundBlocks);
    lock.unlock();
    const bool ok = commit(from, to);
    lock.lock();
    if (!ok) {
      stopped_ = true;
    } else {
      committed_ = to;
    }
    done_.notify_all();
  }
}

}  // namespace kvlm
