// ChunkRegions: how a matmul call splits its row chunks between the threads.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "common/assert.h"

namespace kvlm {

// Hands out chunk indices [0, num_chunks) to num_regions threads: each walks
// its own contiguous share front to back, so its next chunk is the bytes
// after its last (one stream for the hardware prefetcher, not a restart per
// chunk), and a thread done with its share takes chunks from the back of
// another's. Still on demand, one chunk at a time: a thread the OS preempts
// delays the call by one chunk, not by its share.
class ChunkRegions {
 public:
  static constexpr int kMaxRegions = 64;
  ChunkRegions(int64_t num_chunks, int num_regions) : num_regions_(std::clamp(num_regions, 1, kMaxRegions)) {
    KVLM_ASSERT(num_chunks < (int64_t{1} << 31), "ChunkRegions: too many chunks");
    for (int r = 0; r < num_regions_; ++r) {
      const auto begin = static_cast<uint64_t>(num_chunks * r / num_regions_);
      const auto end = static_cast<uint64_t>(num_chunks * (r + 1) / num_regions_);
      regions_[r].span.store(begin << 32 | end);
    }
  }
  // The next chunk for the thread of `region` (any int: taken modulo), or -1
  // when every chunk is taken.
  int64_t next(int region) {
    region %= num_regions_;
    int64_t chunk = take(regions_[region], /*front=*/true);
    for (int k = 1; chunk < 0 && k < num_regions_; ++k) chunk = take(regions_[(region + k) % num_regions_], false);
    return chunk;
  }

 private:
  struct alignas(64) Region {
    std::atomic<uint64_t> span;  // next chunk << 32 | end of the chunks left
  };
  static int64_t take(Region& r, bool front) {
    uint64_t s = r.span.load();
    while (true) {
      const uint64_t first = s >> 32, end = s & 0xFFFFFFFFu;
      if (first >= end) return -1;
      const uint64_t taken = front ? (first + 1) << 32 | end : first << 32 | (end - 1);
      if (r.span.compare_exchange_weak(s, taken)) return static_cast<int64_t>(front ? first : end - 1);
    }
  }
  Region regions_[kMaxRegions];
  int num_regions_;
};

}  // namespace kvlm
