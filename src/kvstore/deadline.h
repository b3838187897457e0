// When a tier operation must be over: one point in time for the whole of a
// lookup (connect, every pipeline, every redirect), so a tier that answers
// slowly, a byte at a time or with endless redirects costs a request at most
// --kv-tier-timeout-ms (docs/kv-tiers.md "Deadlines").
#pragma once

#include <algorithm>
#include <limits>

#include "common/clock.h"

namespace kvlm {

struct Deadline {
  double at_s = std::numeric_limits<double>::infinity();  // steady_clock() seconds; inf: none

  static Deadline in(double seconds, const Clock& clock = steady_clock()) { return {clock.now_s() + seconds}; }
  static Deadline none() { return {}; }
  // Seconds left (<= 0 once passed).
  double remaining_s(const Clock& clock = steady_clock()) const { return at_s - clock.now_s(); }
  bool passed(const Clock& clock = steady_clock()) const { return remaining_s(clock) <= 0; }
  // The earlier of this and `seconds` from now.
  Deadline within(double seconds, const Clock& clock = steady_clock()) const {
    return {std::min(at_s, clock.now_s() + seconds)};
  }
};

}  // namespace kvlm
