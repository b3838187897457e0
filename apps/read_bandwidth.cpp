#include "apps/read_bandwidth.h"

#include <algorithm>
#include <atomic>
#include <chrono>

#include "backend/chunk_regions.h"
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

// The pages the packed weights live on (pack_for_matmul) and their order of
// reading: with 4 KiB pages and chunks dealt to the threads in turn, this
// probe read 50.9-52.3 GB/s in minutes when Q4_0 decode of TinyLlama's shape
// read its weights at ~65 (Zen 5, 2026-12-02; bench model reported decode at
// 130% of its limit), against 82.5-89.3 now.
ReadBandwidthProbe::ReadBandwidthProbe(size_t num_bytes)
    : buffer_(std::max(kHugePageBytes, num_bytes / kHugePageBytes * kHugePageBytes), "the read-bandwidth probe"),
      num_words_(buffer_.size() / sizeof(uint64_t)),
      num_chunks_(std::max<int64_t>(64, 8 * num_threads())),
      chunk_words_((num_words_ + num_chunks_ - 1) / num_chunks_) {
  // First touch on the compute threads, so pages land near the threads that read them.
  auto* words = reinterpret_cast<uint64_t*>(buffer_.data());
  over_chunks([&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) words[i] = i;
  });
}

// fn(begin, end) for every chunk of words, on the compute threads as a matmul
// call hands out its row chunks (ChunkRegions): each thread walks its own
// contiguous run front to back, one stream for the hardware prefetchers, and
// takes chunks from the back of another's when done, so a thread the OS
// deschedules for a while delays the pass by a chunk at most.
template <typename Fn>
void ReadBandwidthProbe::over_chunks(Fn&& fn) {
  const int threads = num_threads();
  ChunkRegions regions(num_chunks_, threads);
  parallel_for(threads, [&](int64_t, int worker) {
    for (int64_t c = regions.next(worker); c >= 0; c = regions.next(worker)) {
      const size_t b = std::min(num_words_, static_cast<size_t>(c) * chunk_words_);
      fn(b, std::min(num_words_, b + chunk_words_));
    }
  });
}

double ReadBandwidthProbe::pass_gb_s() {
  const auto* words = reinterpret_cast<const uint64_t*>(buffer_.data());
  std::atomic<uint64_t> sink{0};  // the sums go into an atomic, so the reads cannot be dropped
  const auto t0 = std::chrono::steady_clock::now();
  over_chunks([&](size_t b, size_t e) { sink.fetch_add(sum_words(words + b, e - b), std::memory_order_relaxed); });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<double>(buffer_.size()) / s / 1e9;
}

}  // namespace kvlm::apps
