#include "server/http/connection_limit.h"

#include <sys/socket.h>

#include "server/http/own_fds.h"

namespace kvlm {
namespace {

thread_local bool t_over_limit = false;

}  // namespace

LimitedTaskQueue::LimitedTaskQueue(size_t num_threads, size_t max_connections, std::atomic<int64_t>& num_rejected)
    : accepted_(num_threads), refused_(kNumRejectThreads), max_connections_(max_connections), num_rejected_(num_rejected) {}

void LimitedTaskQueue::enqueue(std::function<void()> fn) {
  // Only the accepting thread enqueues, so the check and the increment
  // cannot interleave with another enqueue (workers only decrement).
  if (max_connections_ > 0 && num_open_.load() >= max_connections_) {
    ++num_rejected_;
    refused_.enqueue([fn = std::move(fn)] {
      t_over_limit = true;
      fn();  // reads the request, answers 503, closes the socket
      t_over_limit = false;
    });
    return;
  }
  ++num_open_;
  accepted_.enqueue([this, fn = std::move(fn)] {
    fn();
    --num_open_;
  });
}

void LimitedTaskQueue::shutdown() {
  accepted_.shutdown();
  refused_.shutdown();
}

bool LimitedTaskQueue::over_limit() { return t_over_limit; }

void raise_listen_backlog(int port) {
  visit_own_fds([port](int fd) {
    int listening = 0;
    socklen_t len = sizeof(listening);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) return false;
    sockaddr_storage local{};
    socklen_t local_len = sizeof(local);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0) return false;
    if (socket_port(local) == port) ::listen(fd, SOMAXCONN);
    return false;  // every listener on the port (IPv4 and IPv6)
  });
}

}  // namespace kvlm
