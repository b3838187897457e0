#include "sched/request.h"

namespace kvlm {

std::string_view finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAborted:
      return "abort";
  }
  return "unknown";
}

}  // namespace kvlm
