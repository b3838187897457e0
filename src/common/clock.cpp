#include "common/clock.h"

namespace kvlm {
const Clock& steady_clock() {
  static const SteadyClock clock;
  return clock;
}
}  // namespace kvlm
