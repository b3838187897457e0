// Time source. Code that measures latency takes a Clock& so tests can use
// FakeClock and assert exact numbers.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace kvlm {

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic time in seconds since an arbitrary origin.
  virtual double now_s() const = 0;
};

class SteadyClock final : public Clock {
 public:
  double now_s() const override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
};

class FakeClock final : public Clock {
 public:
  double now_s() const override { return t_.load(); }
  void advance(double seconds) { t_.store(t_.load() + seconds); }
  void set(double seconds) { t_.store(seconds); }

 private:
  std::atomic<double> t_{0.0};
};

// Process-wide steady clock (stateless, safe to share).
const Clock& steady_clock();

}  // namespace kvlm
