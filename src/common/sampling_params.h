// What a request asks of the sampler, as plain data: the protocols (wire/)
// read it from a request and the engine hands it to its Sampler
// (runner/sampler.h), so it lives below both.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace kvlm {

struct SamplingParams {
  float temperature = 0.8f;        // <= 0: greedy (argmax)
  int32_t top_k = 40;              // <= 0: off
  float top_p = 0.95f;             // >= 1: off
  float min_p = 0.05f;             // <= 0: off
  float repetition_penalty = 1.0f; // 1: off; applied to the last repeat_last_n tokens
  float frequency_penalty = 0.0f;  // OpenAI: minus this times the count of each recent token
  float presence_penalty = 0.0f;   // OpenAI: minus this once for each recent token
  int32_t repeat_last_n = 64;      // window of the three penalties (as llama.cpp)
  std::vector<std::pair<int32_t, float>> logit_bias;  // added to the logits of these ids
  uint64_t seed = 0;

  // Throws Error(kInvalidArgument) naming the field that is out of range.
  void validate() const;
};

// The most top log-probabilities a request may ask for (vLLM's default).
inline constexpr int32_t kMaxLogprobs = 20;

}  // namespace kvlm
