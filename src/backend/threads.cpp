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
  int n = g_num_threads.load(std::memory_order_relaxed);
  if (n > 0) return n;
  // Unset (a library user or a benchmark that never called set_num_threads):
  // the default is worked out once and kept. Every kernel call asks, and
  // default_num_threads() is a getenv and a sched_getaffinity system call:
  // half of bench_attention's BM_Softmax time went there. A concurrent
  // set_num_threads wins the exchange.
  const int fallback = default_num_threads();
  return g_num_threads.compare_exchange_strong(n, fallback, std::memory_order_relaxed) ? fallback : n;
}

}  // namespace kvlm
