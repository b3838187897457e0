// The machine's read bandwidth, measured the way a decode step reads its
// weights: every compute thread streams its own run of one buffer far larger
// than the caches, on 2 MiB pages, handed out as a matmul call hands out its
// row chunks (ChunkRegions), on kvlm's own thread pool so it uses the same
// thread count as the forward pass.
#pragma once

#include <cstddef>

namespace kvlm::apps {

// Best of `reps` passes summing `num_bytes` bytes (rounded down to 2 MiB
// pages), in GB/s (1e9 bytes per second). num_bytes should be several times
// the last-level cache; 256 MiB is plenty on the machines we run on.
double measure_read_bandwidth_gb_s(size_t num_bytes = size_t{256} << 20, int reps = 5);

}  // namespace kvlm::apps
