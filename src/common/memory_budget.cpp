#include "common/memory_budget.h"

#include "common/assert.h"

namespace kvlm {

bool MemoryBudget::try_take(int64_t bytes) {
  int64_t used = in_use_.load(std::memory_order_relaxed);
  do {
    if (used + bytes > limit_) return false;
  } while (!in_use_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
  return true;
}

void MemoryBudget::give_back(int64_t bytes) {
  const int64_t before = in_use_.fetch_sub(bytes, std::memory_order_relaxed);
  KVLM_ASSERT(before >= bytes, "memory given back twice");
}

}  // namespace kvlm
