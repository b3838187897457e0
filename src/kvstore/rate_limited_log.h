// Warnings for a failing tier: a dead Redis fails every lookup, and one line
// per lookup would bury the log. At most one line per interval; the next one
// says how many were held back.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>

#include "common/clock.h"
#include "common/log.h"

namespace kvlm {

class RateLimitedLog {
 public:
  explicit RateLimitedLog(std::string tier, double interval_s = 5.0, const Clock& clock = steady_clock())
      : tier_(std::move(tier)), interval_s_(interval_s), clock_(clock) {}

  template <typename... Args>
  void warn(fmt::format_string<Args...> f, Args&&... args) {
    int64_t num_held;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const double now = clock_.now_s();
      if (has_logged_ && now - last_s_ < interval_s_) {
        ++num_held_;
        return;
      }
      has_logged_ = true;
      last_s_ = now;
      num_held = num_held_;
      num_held_ = 0;
    }
    std::string msg = fmt::format(f, std::forward<Args>(args)...);
    if (num_held > 0) msg += fmt::format(" ({} more like this held back)", num_held);
    log_warn("kv tier {}: {}", tier_, msg);
  }

 private:
  std::string tier_;
  double interval_s_;
  const Clock& clock_;
  std::mutex mu_;
  bool has_logged_ = false;
  double last_s_ = 0;
  int64_t num_held_ = 0;
};

}  // namespace kvlm
