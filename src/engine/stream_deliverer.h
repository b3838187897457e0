// Hands tokens, text and endings to request streams on a thread of its own.
//
// Waking a reader is a system call and often a context switch; with 64
// streams a step woke 64 threads from the step thread, which made stream
// delivery the largest serial cost around the forward pass. The
// step thread now queues each step's deliveries as one batch and goes on
// with the next step while this thread wakes the readers.
//
// Order: batches run in the order they were posted and each batch in its own
// order, so a stream sees its pushes and its ending exactly as the engine
// produced them. Thread safety: post() from one thread at a time (the engine
// thread); the destructor delivers everything posted, then joins.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kvlm {

class StreamDeliverer {
 public:
  using Delivery = std::function<void()>;

  StreamDeliverer();
  ~StreamDeliverer();
  StreamDeliverer(const StreamDeliverer&) = delete;
  StreamDeliverer& operator=(const StreamDeliverer&) = delete;

  // Queues a batch (emptied); no-op for an empty one.
  void post(std::vector<Delivery>& batch);

 private:
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Delivery> queue_;  // guarded by mu_
  bool stopping_ = false;        // guarded by mu_
  std::thread thread_;
};

}  // namespace kvlm
