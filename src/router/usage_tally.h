// The tokens a worker's answer reports, in each API's own shape, so the
// router charges a client's key (its tokens per minute) for every API it
// forwards: OpenAI's chat and completions (usage.total_tokens), Anthropic's
// Messages (input_tokens + output_tokens; streamed, message_start's and the
// last message_delta's) and OpenAI's Responses (usage.total_tokens of the
// response, or of its response.completed / incomplete / failed event).
#pragma once

#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

namespace kvlm::router {

// A `usage` object's tokens: total_tokens, else input_tokens + output_tokens,
// else prompt_tokens + completion_tokens; 0 for anything else.
int64_t usage_total(const nlohmann::ordered_json& usage);

// The usage of a whole answer's body (any of the three APIs); 0 when none.
int64_t body_usage_total(std::string_view body);

// A stream's usage, from its events' data as they pass.
class UsageTally {
 public:
  void feed_event(std::string_view data);
  int64_t total() const;

 private:
  int64_t reported_ = 0;           // a usage object that counts the whole answer
  int64_t input_ = 0, output_ = 0; // Anthropic's message_start / message_delta
};

}  // namespace kvlm::router
