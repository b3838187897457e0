// Where a request's output stands in its thinking section
// (GenerateRequest::Thinking): inside it or in the answer, and how many
// tokens it has spent thinking. Fed each generated token's bytes on the
// engine thread. Internal to src/engine/.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kvlm {

class ThinkingTracker {
 public:
  // thinking: the output starts inside the section (opened by the prompt, or
  // by tokens about to be forced).
  ThinkingTracker(std::string close, bool thinking, int32_t budget)
      : close_(std::move(close)), thinking_(thinking), budget_(budget) {}

  // The next token's bytes; returns the part of them that belongs to the
  // answer (all of them once it has begun; none while thinking; after the
  // close marker in the token that completes it).
  std::string_view push(std::string_view bytes);
  bool thinking() const { return thinking_; }
  // Inside the section past its budget: time to force the close.
  bool budget_spent() const { return thinking_ && budget_ >= 0 && num_tokens_ >= budget_; }
  int32_t num_tokens() const { return num_tokens_; }

 private:
  std::string close_;
  bool thinking_;
  int32_t budget_;
  int32_t num_tokens_ = 0;  // tokens pushed while thinking
  std::string window_;      // the last bytes while thinking (a marker split over tokens)
};

}  // namespace kvlm
