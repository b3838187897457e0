// Test-only fault injection into the engine (EngineConfig::fault_hook).
//
// A FaultSpec says which requests fail, when, and how; fault_hook() turns it
// into the hook the engine calls before each sampling of a request. Commands
// that start an engine arm it from the KVLM_FAULT environment variable, so an
// unmodified `kvlm serve` can be tested under faults; unset, nothing is armed
// and the engine pays one empty std::function check per sampled token.
//
//   KVLM_FAULT="kind=bad_alloc,request=6,at=2"  request 6 fails at its 3rd token
//   KVLM_FAULT="kind=error,every=10"            every 10th request fails at its 1st token
//   KVLM_FAULT="kind=delay,ms=20"               every sampling sleeps 20 ms (slows
//                                               generation, to hold limits reached)
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "common/strong_id.h"

namespace kvlm {

enum class FaultKind {
  kBadAlloc,  // throws std::bad_alloc: an allocation failure in the request's step
  kError,     // throws std::runtime_error: any other exception in it
  kDelay,     // sleeps: no failure, a slow step
};

struct FaultSpec {
  FaultKind kind = FaultKind::kError;
  std::optional<int64_t> request;  // this request id only
  int64_t every = 1;               // else request ids divisible by this
  int32_t at = 0;                  // when the request has generated this many tokens
  int32_t delay_ms = 0;            // kDelay
};

// "key=value,..." as above. Throws Error(kInvalidArgument) naming the bad part.
FaultSpec parse_fault_spec(std::string_view text);
std::function<void(RequestId, int32_t)> fault_hook(const FaultSpec& spec);
// From $KVLM_FAULT; an empty hook when unset or empty.
std::function<void(RequestId, int32_t)> fault_hook_from_env();

}  // namespace kvlm
