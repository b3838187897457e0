// A model's own default sampling: what its generation_config.json says
// (written into GGUF as general.sampling.*, as llama.cpp's converter does;
// model/hf_tokenizer.cpp reads a folder's). With --generation-config auto
// (the default, as vLLM's) a request that leaves a field unset gets the
// model's value instead of OpenAI's default.
#pragma once

#include <optional>
#include <string>

#include "common/metadata.h"
#include "runner/sampler.h"
#include "wire/openai/protocol.h"

namespace kvlm {

struct SamplingDefaults {
  std::optional<float> temperature, top_p, min_p, repetition_penalty;
  std::optional<int32_t> top_k;

  // Values out of their field's range are left out (with a warning).
  static SamplingDefaults from_metadata(const Metadata& m);
  bool empty() const { return !temperature && !top_p && !min_p && !repetition_penalty && !top_k; }
  // "temperature 0.6, top_p 0.95" (for the start-up log; "" when empty).
  std::string describe() const;
  // The fields the request did not set take these values.
  void apply(const openai::GenerationOptions::Given& given, SamplingParams& s) const;
};

}  // namespace kvlm
