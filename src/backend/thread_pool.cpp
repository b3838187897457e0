#include "backend/thread_pool.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KVLM_CPU_RELAX() _mm_pause()
#else
#define KVLM_CPU_RELAX() ((void)0)
#endif

#include "backend/threads.h"
#include "common/assert.h"

namespace kvlm {
namespace {

thread_local bool t_in_job = false;  // see parallel_for

// Iterations a thread polls before it sleeps (worker waiting for a job) or
// yields (caller waiting for claimed tasks). ~50 µs: long enough that the
// back-to-back kernels of a forward pass never pay a wake-up, short enough
// that idle workers leave the cores to others.
constexpr int kSpinIterations = 20000;

// One job at a time. `state` packs (generation << 32 | next task index) so a
// claim is one compare-and-swap that fails if the job was replaced: a worker
// that read a stale job's fields can never run one of its tasks.
class Pool {
 public:
  explicit Pool(int num_workers) {
    for (int i = 0; i < num_workers; ++i) threads_.emplace_back([this, i] { worker_loop(i + 1); });
  }
  ~Pool() {
    stop_.store(true);
    wake_.fetch_add(1);
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }
  int size() const { return static_cast<int>(threads_.size()) + 1; }

  void run(int64_t num_tasks, void (*call)(void*, int64_t, int), void* ctx) {
    KVLM_ASSERT(num_tasks < (int64_t{1} << 31), "too many tasks for one parallel_for");
    const uint64_t gen = (state_.load() >> 32) + 1;
    // Seqlock: mark the slot as being rewritten (index past any task count)
    // before touching the fields, publish the new generation last.
    state_.store(gen << 32 | 0xFFFFFFFFu);
    call_.store(call);
    ctx_.store(ctx);
    num_tasks_.store(num_tasks);
    done_.store(0);
    state_.store(gen << 32);
    if (sleepers_.load() > 0) {
      wake_.fetch_add(1);
      wake_.notify_all();
    }
    int64_t mine = 0;
    while (claim_and_run(gen, 0)) ++mine;
    // Wait only for tasks other threads claimed.
    for (int spins = 0; done_.load() + mine < num_tasks; ++spins) {
      if (spins < kSpinIterations) {
        KVLM_CPU_RELAX();
      } else {
        std::this_thread::yield();
      }
    }
  }

 private:
  // Claims one task of generation `gen` and runs it. False when none is left
  // or the generation moved on.
  bool claim_and_run(uint64_t gen, int worker) {
    uint64_t s = state_.load();
    while (true) {
      if ((s >> 32) != gen) return false;
      auto call = call_.load();
      void* ctx = ctx_.load();
      const int64_t n = num_tasks_.load();
      const int64_t task = static_cast<int64_t>(s & 0xFFFFFFFFu);
      if (task >= n) return false;
      // Succeeds only if nothing changed since `s` was read, so call/ctx/n
      // above belong to this generation.
      if (state_.compare_exchange_weak(s, s + 1)) {
        call(ctx, task, worker);
        if (worker != 0) done_.fetch_add(1);
        return true;
      }
    }
  }

  void worker_loop(int worker) {
    t_in_job = true;
    uint64_t last_gen = 0;  // a pool starts at generation 0; jobs count from 1
    while (!stop_.load()) {
      uint64_t gen = state_.load() >> 32;
      if (gen == last_gen || (state_.load() & 0xFFFFFFFFu) == 0xFFFFFFFFu) {
        bool found = false;
        for (int i = 0; i < kSpinIterations && !found; ++i) {
          KVLM_CPU_RELAX();
          gen = state_.load() >> 32;
          found = gen != last_gen || stop_.load();
        }
        if (!found) {
          const uint32_t ticket = wake_.load();
          sleepers_.fetch_add(1);
          if ((state_.load() >> 32) == last_gen && !stop_.load()) wake_.wait(ticket);
          sleepers_.fetch_sub(1);
        }
        continue;
      }
      last_gen = gen;
      while (claim_and_run(gen, worker)) {
      }
    }
  }

  std::vector<std::thread> threads_;
  std::atomic<uint64_t> state_{0};
  std::atomic<void (*)(void*, int64_t, int)> call_{nullptr};
  std::atomic<void*> ctx_{nullptr};
  std::atomic<int64_t> num_tasks_{0};
  std::atomic<int64_t> done_{0};
  std::atomic<uint32_t> wake_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
};

// Process-wide, like OpenMP's runtime: the kernels have no context object to
// hang a pool on. g_run_mu is held for a whole job: one job at a time.
std::mutex g_run_mu;
std::unique_ptr<Pool> g_pool;
// t_in_job is true on pool workers and on a caller while its job runs: a
// nested parallel_for runs serially (and never re-locks g_run_mu it holds).

}  // namespace

void parallel_for(int64_t num_tasks, void (*call)(void*, int64_t, int), void* ctx) {
  if (num_tasks <= 0) return;
  const int threads = num_threads();
  std::unique_lock lock(g_run_mu, std::defer_lock);
  if (threads <= 1 || num_tasks == 1 || t_in_job || !lock.try_lock()) {
    for (int64_t t = 0; t < num_tasks; ++t) call(ctx, t, 0);
    return;
  }
  if (!g_pool || g_pool->size() != threads) {
    g_pool.reset();
    g_pool = std::make_unique<Pool>(threads - 1);
  }
  t_in_job = true;
  g_pool->run(num_tasks, call, ctx);
  t_in_job = false;
}

}  // namespace kvlm
