// Bytes in use against a limit, shared by whatever draws from it (grammar
// compilations and compiled grammars, parsed request bodies). Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>

namespace kvlm {

class MemoryBudget {
 public:
  explicit MemoryBudget(int64_t limit_bytes) : limit_(limit_bytes) {}
  // Takes `bytes` if they fit under the limit; false (taking nothing) otherwise.
  bool try_take(int64_t bytes);
  // Takes `bytes` even past the limit (what exists already must be counted).
  void take(int64_t bytes) { in_use_.fetch_add(bytes, std::memory_order_relaxed); }
  void give_back(int64_t bytes);
  int64_t num_bytes_in_use() const { return in_use_.load(std::memory_order_relaxed); }
  int64_t limit() const { return limit_; }

 private:
  const int64_t limit_;
  std::atomic<int64_t> in_use_{0};
};

}  // namespace kvlm
