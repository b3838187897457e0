#include "backend/threads.h"

#include <omp.h>

#include <atomic>
#include <cstdlib>

namespace kvlm {
namespace {

// The one process-wide knob for kernel parallelism (-t). Atomic because the
// engine thread reads it while start-up code may still be setting it.
std::atomic<int> g_num_threads{0};  // 0: not set yet, use OpenMP's default

}  // namespace

void set_num_threads(int num_threads) {
  // Default: OMP_NUM_THREADS if the environment sets it (tests run one
  // thread per process), else every core.
  if (num_threads <= 0) num_threads = std::getenv("OMP_NUM_THREADS") ? omp_get_max_threads() : omp_get_num_procs();
  g_num_threads.store(num_threads, std::memory_order_relaxed);
  omp_set_num_threads(num_threads);
}

int num_threads() {
  const int n = g_num_threads.load(std::memory_order_relaxed);
  return n > 0 ? n : omp_get_max_threads();
}

}  // namespace kvlm
