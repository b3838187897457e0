// The compute threads behind every parallel kernel.
//
// Why not OpenMP: at the end of each parallel region OpenMP waits for every
// thread of the team to arrive. When the machine is shared (a CI box running
// tests side by side, a server with other load) one descheduled worker stalls
// every region for a whole scheduler time slice, and a forward pass has
// dozens of regions: we measured 30x slowdowns. Here the caller waits only
// for tasks that were actually claimed; a worker that wakes late finds the
// job finished and goes back to waiting.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

namespace kvlm {

// Runs fn(task, worker) for task in [0, num_tasks) on up to num_threads()
// threads (the caller is one of them; worker is in [0, num_threads())), and
// returns when every task has finished. Tasks are handed out one at a time,
// in order, to whichever thread asks next. A call made while the pool is busy
// (from inside a task, or from a second thread while another caller runs a
// job) runs its tasks serially on the calling thread: correct, never blocked.
void parallel_for(int64_t num_tasks, void (*call)(void* ctx, int64_t task, int worker), void* ctx);

template <typename Fn>
void parallel_for(int64_t num_tasks, Fn&& fn) {
  using F = std::remove_reference_t<Fn>;
  parallel_for(
      num_tasks, [](void* ctx, int64_t task, int worker) { (*static_cast<F*>(ctx))(task, worker); },
      const_cast<void*>(static_cast<const void*>(&fn)));
}

}  // namespace kvlm
