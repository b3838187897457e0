// The machine's read bandwidth, measured the way a decode step reads its
// weights: every compute thread streams its own run of one buffer far larger
// than the caches, on 2 MiB pages, handed out as a matmul call hands out its
// row chunks (ChunkRegions), on kvlm's own thread pool so it uses the same
// thread count as the forward pass.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/huge_pages.h"

namespace kvlm::apps {

// A buffer of `num_bytes` (rounded down to 2 MiB pages; several times the
// last-level cache: 256 MiB is plenty on the machines we run on), written
// once at construction so that its pages are committed. On the hosts we
// measure on the memory's speed changes within seconds (38 to 85 GB/s on one
// Zen 5 in a minute), so bench model times single passes between the runs it
// compares them with rather than one burst before or after them.
class ReadBandwidthProbe {
 public:
  explicit ReadBandwidthProbe(size_t num_bytes = size_t{256} << 20);
  // One pass summing the whole buffer, in GB/s (1e9 bytes per second).
  double pass_gb_s();

 private:
  template <typename Fn>
  void over_chunks(Fn&& fn);
  HugePageBuffer buffer_;
  size_t num_words_ = 0;
  int64_t num_chunks_ = 0;
  size_t chunk_words_ = 0;
};

}  // namespace kvlm::apps
