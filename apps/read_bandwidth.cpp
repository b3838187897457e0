#include "apps/read_bandwidth.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

#include "backend/chunk_regions.h"
#include "backend/thread_pool.h"
#include "backend/threads.h"
#include "common/huge_pages.h"

namespace kvlm::apps {
namespace {

// Integer sums: addition is associative, so the compiler vectorizes the loop
// without -ffast-math and the pass is limited by memory, not by add latency.
uint64_t sum_words(const uint64_t* p, size_t n) {
  uint64_t acc = 0;
  for (size_t i = 0; i < n; ++i) acc += p[i];
  return acc;
}

// Runs fn(chunk) for every chunk in [0, num_chunks) on the compute threads as
// a matmul call hands out its row chunks (ChunkRegions): each thread walks
// its own contiguous run front to back, one stream for the hardware
// prefetchers, and takes chunks from the back of another's when done, so a
// thread the OS deschedules for a while delays the pass by a chunk at most.
template <typename Fn>
void over_regions(int64_t num_chunks, Fn&& fn) {
  const int threads = num_threads();
  ChunkRegions regions(num_chunks, threads);
  parallel_for(threads, [&](int64_t, int worker) {
    for (int64_t c = regions.next(worker); c >= 0; c = regions.next(worker)) fn(c);
  });
}

}  // namespace

double measure_read_bandwidth_gb_s(size_t num_bytes, int reps) {
  const size_t bytes = std::max(kHugePageBytes, num_bytes / kHugePageBytes * kHugePageBytes);
  // The pages the packed weights live on (pack_for_matmul): with 4 KiB pages
  // and chunks dealt out in turn, this probe read 49.8 GB/s in a minute when
  // Q4_0 decode of TinyLlama's shape read its weights at ~65 (Zen 5,
  // 2026-12-02), and bench model reported decode at 130% of its limit.
  HugePageBuffer buffer(bytes, "the read-bandwidth probe");
  auto* words = reinterpret_cast<uint64_t*>(buffer.data());
  const size_t num_words = bytes / sizeof(uint64_t);
  const int64_t num_chunks = std::max<int64_t>(64, 8 * num_threads());
  const size_t chunk = (num_words + num_chunks - 1) / num_chunks;
  auto range = [&](int64_t c) {
    const size_t b = std::min(num_words, static_cast<size_t>(c) * chunk);
    return std::pair<size_t, size_t>{b, std::min(num_words, b + chunk)};
  };
  // First touch on the compute threads, so pages land near the threads that read them.
  over_regions(num_chunks, [&](int64_t c) {
    const auto [b, e] = range(c);
    for (size_t i = b; i < e; ++i) words[i] = i;
  });
  std::atomic<uint64_t> sink{0};
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    over_regions(num_chunks, [&](int64_t c) {
      const auto [b, e] = range(c);
      sink.fetch_add(sum_words(words + b, e - b), std::memory_order_relaxed);
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, static_cast<double>(bytes) / s / 1e9);
  }
  return best;  // the sums went into an atomic, so the reads cannot be dropped
}

}  // namespace kvlm::apps
