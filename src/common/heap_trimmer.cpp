#include "common/heap_trimmer.h"

#include <algorithm>
#include <fstream>

#include <unistd.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace kvlm {

HeapTrimmer::HeapTrimmer(int64_t threshold_bytes, std::chrono::milliseconds period)
    : threshold_bytes_(threshold_bytes), period_(period), thread_([this] { run(); }) {}

HeapTrimmer::~HeapTrimmer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  thread_.join();
}

int64_t HeapTrimmer::free_heap_bytes() {
#if defined(__GLIBC__)
  return static_cast<int64_t>(mallinfo2().fordblks);
#else
  return 0;
#endif
}

bool HeapTrimmer::trim() {
#if defined(__GLIBC__)
  return malloc_trim(0) != 0;
#else
  return false;
#endif
}

int64_t HeapTrimmer::resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t num_pages = 0, num_resident_pages = 0;
  if (!(statm >> num_pages >> num_resident_pages)) return 0;
  return num_resident_pages * ::sysconf(_SC_PAGESIZE);
}

void HeapTrimmer::run() {
  resident_after_trim_ = resident_bytes();
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_cv_.wait_for(lock, period_, [this] { return stopping_; })) {
    const int64_t resident = resident_bytes();
    // What was given back some other way counts from where it went down to.
    resident_after_trim_ = std::min(resident_after_trim_, resident);
    if (resident - resident_after_trim_ < threshold_bytes_ || free_heap_bytes() < threshold_bytes_) continue;
    lock.unlock();
    trim();
    num_trims_.fetch_add(1, std::memory_order_relaxed);
    resident_after_trim_ = resident_bytes();
    lock.lock();
  }
}

}  // namespace kvlm
