#include "backend/threads.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <thread>

namespace kvlm {
namespace {

// The one process-wide knob for kernel parallelism (-t). Atomic because the
// engine thread reads it while start-up code may still be setting it.
std::atomic<int> g_num_threads{0};  // 0: not set yet, use the default

// $OMP_NUM_THREADS if set (the conventional knob; tests run one thread per
// process), else the CPUs this process may run on.
int default_num_threads() {
  if (const char* env = std::getenv("OMP_NUM_THREADS")) {
    int n = std::atoi(env);
    if (n > 0) return n;
  }
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

void set_num_threads(int num_threads) {
  if (num_threads <= 0) num_threads = default_num_threads();
  g_num_threads.store(num_threads, std::memory_order_relaxed);
}

int num_threads() {
  const int n = g_num_threads.load(std::memory_order_relaxed);
  return n > 0 ? n : default_num_threads();
}

}  // namespace kvlm
