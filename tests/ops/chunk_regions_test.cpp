// ChunkRegions: every chunk once, each thread's share front to back.
#include "backend/chunk_regions.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace kvlm {
namespace {

// One thread alone walks its share in order, then takes the others' from their backs.
TEST(ChunkRegions, OneThreadWalksItsShareThenTakesTheOthersFromTheBack) {
  ChunkRegions regions(10, 2);  // shares [0, 5) and [5, 10)
  std::vector<int64_t> order;
  for (int64_t c = regions.next(1); c >= 0; c = regions.next(1)) order.push_back(c);
  EXPECT_EQ(order, (std::vector<int64_t>{5, 6, 7, 8, 9, 4, 3, 2, 1, 0}));
  EXPECT_EQ(regions.next(0), -1);
}

// Uneven shares, more regions than chunks, a region index past the count.
TEST(ChunkRegions, SharesCoverEveryChunkWhateverTheCounts) {
  for (int64_t n : {0, 1, 3, 7, 64}) {
    for (int r : {1, 2, 3, 8}) {
      ChunkRegions regions(n, r);
      std::vector<int> seen(static_cast<size_t>(n), 0);
      for (int64_t c = regions.next(r + 1); c >= 0; c = regions.next(r + 1)) ++seen[static_cast<size_t>(c)];
      for (int64_t c = 0; c < n; ++c) EXPECT_EQ(seen[static_cast<size_t>(c)], 1) << n << " " << r << " " << c;
    }
  }
}

// Threads that race for the same chunks: each is handed out exactly once,
// and a thread's own chunks come in increasing order.
TEST(ChunkRegions, RacingThreadsTakeEveryChunkOnce) {
  constexpr int kThreads = 4;
  constexpr int64_t kChunks = 20000;
  for (int round = 0; round < 20; ++round) {
    ChunkRegions regions(kChunks, kThreads);
    std::vector<std::vector<int64_t>> taken(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int64_t c = regions.next(t); c >= 0; c = regions.next(t)) taken[t].push_back(c);
      });
    }
    for (auto& th : threads) th.join();
    std::vector<int> seen(kChunks, 0);
    for (int t = 0; t < kThreads; ++t) {
      const int64_t begin = kChunks * t / kThreads, end = kChunks * (t + 1) / kThreads;
      int64_t last_own = -1;
      for (int64_t c : taken[t]) {
        ++seen[static_cast<size_t>(c)];
        if (c >= begin && c < end) {
          EXPECT_GT(c, last_own);
          last_own = c;
        }
      }
    }
    for (int64_t c = 0; c < kChunks; ++c) ASSERT_EQ(seen[static_cast<size_t>(c)], 1) << c;
  }
}

}  // namespace
}  // namespace kvlm
