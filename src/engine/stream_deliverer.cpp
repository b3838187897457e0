#include "engine/stream_deliverer.h"

namespace kvlm {

StreamDeliverer::StreamDeliverer() : thread_([this] { run(); }) {}

StreamDeliverer::~StreamDeliverer() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void StreamDeliverer::post(std::vector<Delivery>& batch) {
  if (batch.empty()) return;
  {
    std::lock_guard lock(mu_);
    if (queue_.empty()) {
      queue_.swap(batch);
    } else {
      for (auto& d : batch) queue_.push_back(std::move(d));
    }
  }
  batch.clear();
  cv_.notify_one();
}

void StreamDeliverer::run() {
  std::vector<Delivery> work;
  while (true) {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything delivered
      work.swap(queue_);
    }
    for (auto& d : work) d();
    work.clear();
  }
}

}  // namespace kvlm
