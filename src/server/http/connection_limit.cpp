#include "server/http/connection_limit.h"

#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdlib>

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
#if defined(__linux__)
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return;
  while (const dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    int listening = 0;
    socklen_t len = sizeof(listening);
    if (getsockopt(static_cast<int>(fd), SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) continue;
    sockaddr_storage local{};
    socklen_t local_len = sizeof(local);
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &local_len) != 0) continue;
    int local_port = -1;
    if (local.ss_family == AF_INET) local_port = ntohs(reinterpret_cast<const sockaddr_in&>(local).sin_port);
    if (local.ss_family == AF_INET6) local_port = ntohs(reinterpret_cast<const sockaddr_in6&>(local).sin6_port);
    if (local_port == port) ::listen(static_cast<int>(fd), SOMAXCONN);
  }
  closedir(dir);
#else
  (void)port;
#endif
}

}  // namespace kvlm
