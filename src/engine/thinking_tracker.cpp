#include "engine/thinking_tracker.h"

namespace kvlm {

std::string_view ThinkingTracker::push(std::string_view bytes) {
  if (!thinking_) return bytes;
  ++num_tokens_;
  const size_t before = window_.size();
  window_.append(bytes);
  const size_t at = window_.find(close_);
  if (at == std::string::npos) {
    // Only the marker's length minus one can still start a marker.
    if (window_.size() >= close_.size()) window_.erase(0, window_.size() - close_.size() + 1);
    return {};
  }
  thinking_ = false;
  // The marker ends in this token (it was not found before it).
  const size_t after = at + close_.size() - before;
  window_.clear();
  return bytes.substr(after);
}

}  // namespace kvlm
