// Engine::Live: the engine thread's state for one request (sampler,
// output text, statistics). Internal to src/engine/.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "constrain/matcher.h"
#include "engine/engine.h"
#include "engine/stop_matcher.h"
#include "runner/sampler.h"
#include "tokenizer/tokenizer.h"

namespace kvlm {

// A request's output text: its tokens detokenized, and its stop strings
// matched. One thread owns it. A request with stop strings keeps it on the
// engine thread, where a match must end the request before the next step.
// Any other request hands it to the stream deliverer's thread (only the
// deliveries it runs touch it), so the step thread does not detokenize.
struct OutputText {
  OutputText(const Tokenizer& tok, const GenerateRequest& g)
      : detok(tok, StreamOptions{.render_special = g.render_special}), stop(g.stop) {}
  StreamingDetokenizer detok;
  StopMatcher stop;
};

struct Engine::Live {
  Live(std::shared_ptr<RequestStream> s, const Tokenizer& tok, const GenerateRequest& g, double now)
      : stream(std::move(s)), sampler(g.sampling), text(std::make_shared<OutputText>(tok, g)),
        text_on_engine_thread(!g.stop.empty()), arrival_s(now),
        deadline_s(g.timeout_s > 0 ? now + g.timeout_s : 0), timeout_s(g.timeout_s), logprobs(g.logprobs) {
    if (g.constraint) matcher.emplace(g.constraint);
  }
  std::shared_ptr<RequestStream> stream;
  Sampler sampler;
  std::shared_ptr<OutputText> text;
  bool text_on_engine_thread;  // see OutputText
  double arrival_s;
  double deadline_s;  // 0: none
  double timeout_s;   // GenerateRequest::timeout_s, for the message
  double first_scheduled_s = -1;
  double last_token_s = -1;
  int32_t logprobs;  // GenerateRequest::logprobs
  // Prompt logprobs: computed for positions < next_prompt_position (a
  // preempted request recomputes its prompt; nothing is sent twice), sent
  // with the first generated token.
  int32_t next_prompt_position = 0;
  std::vector<SampledLogprobs> prompt_logprobs;
  RequestStats stats;
  KvBudget kv_budget;
  int32_t peak_resident_tokens = 0;
  // Structured output: where the output stands in its grammar (advanced by
  // every sampled token, so it survives preemption: a recomputed prompt
  // samples nothing again), and scratch for the mask and the masked row.
  std::optional<constrain::Matcher> matcher;
  std::vector<uint8_t> allowed;
  std::vector<float> masked_logits;
};

}  // namespace kvlm
