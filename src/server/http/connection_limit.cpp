#include "server/http/connection_limit.h"

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

}  // namespace kvlm
