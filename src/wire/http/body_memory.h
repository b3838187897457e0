// --body-mem: what the parsed JSON of the requests being handled may hold
// together, for kvlm serve and kvlm router alike. A burst of large bodies
// waits its turn (503 + Retry-After) instead of taking the process's memory.
#pragma once

#include <atomic>
#include <cstdint>

#include "wire/http/message.h"

#include "common/memory_budget.h"

namespace kvlm {

// Takes what parsing `req`'s body may allocate (openai::parsed_json_bytes)
// from `budget`, for the caller to give back when its handler is done
// (BodyMemoryHold). Returns 0 after answering when it does not fit: 413 for
// a body that alone needs more than the whole budget, else 503 with
// Retry-After and code body_memory_exhausted (counted in `num_rejected`).
int64_t take_body_memory(MemoryBudget& budget, int retry_after_s, std::atomic<int64_t>& num_rejected,
                         const http::Request& req, http::Response& res);

// Gives the bytes back when the handler's scope ends.
struct BodyMemoryHold {
  MemoryBudget& budget;
  int64_t bytes;
  ~BodyMemoryHold() { budget.give_back(bytes); }
};

}  // namespace kvlm
