#include "apps/read_bandwidth.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/thread_pool.h"
#include "backend/threads.h"

namespace kvlm::apps {
namespace {

// Integer sums: addition is associative, so the compiler vectorizes the loop
// without -ffast-math and the pass is limited by memory, not by add latency.
uint64_t sum_words(const uint64_t* p, size_t n) {
  uint64_t acc = 0;
  for (size_t i = 0; i < n; ++i) acc += p[i];
  return acc;
}

}  // namespace

double measure_read_bandwidth_gb_s(size_t num_bytes, int reps) {
  constexpr size_t kPage = 4096;
  const size_t num_words = std::max(kPage, num_bytes / kPage * kPage) / sizeof(uint64_t);
  std::unique_ptr<uint64_t[]> words(new uint64_t[num_words]);
  // Chunks much smaller than a thread's share keep both threads busy to the
  // end even when one is descheduled for a while (the pool hands chunks out
  // to whichever thread asks next).
  const int64_t num_chunks = std::max<int64_t>(64, 8 * num_threads());
  const size_t chunk = (num_words + num_chunks - 1) / num_chunks;
  // First touch on the compute threads, so pages land near the threads that read them.
  parallel_for(num_chunks, [&](int64_t c, int) {
    const size_t b = std::min(num_words, c * chunk), e = std::min(num_words, b + chunk);
    for (size_t i = b; i < e; ++i) words[i] = i;
  });
  std::atomic<uint64_t> sink{0};
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    parallel_for(num_chunks, [&](int64_t c, int) {
      const size_t b = std::min(num_words, c * chunk), e = std::min(num_words, b + chunk);
      sink.fetch_add(sum_words(words.get() + b, e - b), std::memory_order_relaxed);
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, static_cast<double>(num_words * sizeof(uint64_t)) / s / 1e9);
  }
  return best;  // the sums went into an atomic, so the reads cannot be dropped
}

}  // namespace kvlm::apps
