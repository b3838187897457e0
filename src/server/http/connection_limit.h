// A cap on the connections the HTTP transport serves at once.
//
// httplib hands every accepted socket to a TaskQueue as one task that reads
// and answers its requests, then closes it. LimitedTaskQueue counts the
// connections it has taken (queued for a worker or being served); past the
// cap a connection goes to a small separate pool instead, where
// over_limit() is true on the thread while its task runs, so the
// pre-routing handler answers its request 503 (with Retry-After) and closes
// it. Accepted connections never wait behind refused ones.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>

#include <httplib.h>

namespace kvlm {

class LimitedTaskQueue : public httplib::TaskQueue {
 public:
  // `max_connections` 0: no cap. `num_rejected` counts refused connections
  // and must outlive the queue.
  LimitedTaskQueue(size_t num_threads, size_t max_connections, std::atomic<int64_t>& num_rejected);
  void enqueue(std::function<void()> fn) override;
  void shutdown() override;

  // On a transport thread: whether the connection being served is past the cap.
  static bool over_limit();

 private:
  // Refusals are quick (one small answer), but a client that connects and
  // sends nothing holds its thread until the read timeout: a few threads, so
  // a flood of them cannot starve accepted connections of anything.
  static constexpr size_t kNumRejectThreads = 4;

  httplib::ThreadPool accepted_;
  httplib::ThreadPool refused_;
  const size_t max_connections_;
  std::atomic<size_t> num_open_{0};
  std::atomic<int64_t>& num_rejected_;
};

// cpp-httplib 0.11 listens with a backlog of 5, compiled into Debian's
// library: a burst of more connections than that overflows the accept queue
// and the kernel answers some of them with a reset (with SYN cookies on) —
// clients see their request dropped unanswered. Listening again on the bound
// socket (found by its port among our descriptors) raises the backlog to
// SOMAXCONN. Linux; a no-op where it cannot find the socket.
void raise_listen_backlog(int port);

}  // namespace kvlm
