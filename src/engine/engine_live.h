// Engine::Live: the engine thread's state for one request (sampler,
// output text, statistics). Internal to src/engine/.
#pragma once

#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "constrain/matcher.h"
#include "engine/engine.h"
#include "engine/spec/speculative.h"
#include "engine/stop_matcher.h"
#include "engine/thinking_tracker.h"
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
        deadline_s(g.timeout_s > 0 ? now + g.timeout_s : 0), timeout_s(g.timeout_s), logprobs(g.logprobs),
        speculative(g.speculative && g.pooling == Pooling::kNone), pooling(g.pooling), normalize(g.normalize) {
    if (g.constraint) matcher.emplace(g.constraint);
    if (g.thinking && (g.thinking->opened || !g.thinking->open_tokens.empty())) {
      const GenerateRequest::Thinking& t = *g.thinking;
      // The budget counts the tokens after a forced open marker.
      const auto num_open = static_cast<int32_t>(t.opened ? 0 : t.open_tokens.size());
      thinking.emplace(t.close, true, t.budget < 0 ? -1 : t.budget + num_open);
      if (!t.opened) forced.assign(t.open_tokens.begin(), t.open_tokens.end());
      // A budget of nothing closes the section the prompt opened at once.
      if (t.opened && t.budget == 0) {
        forced.assign(t.close_tokens.begin(), t.close_tokens.end());
        close_forced = true;
      }
      close_tokens = g.thinking->close_tokens;
      answer_begun = false;
    }
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
  // Speculative decoding: whether it proposes, and its adaptive K (nullopt
  // with a fixed --spec-tokens).
  bool speculative;
  std::optional<SpecController> spec;
  // The grammar of the last step's first num_grammar_advanced tokens was
  // advanced by verify_seq already (grammar_done: by the last of them, the
  // grammar completed); postprocess does not advance them again.
  int32_t num_grammar_advanced = 0;
  bool grammar_done = false;
  std::optional<constrain::Matcher> matcher;
  std::vector<uint8_t> allowed;
  std::vector<float> masked_logits;
  // A thinking section (GenerateRequest::thinking): where the output stands,
  // the tokens to force next (the open marker's, then the close marker's
  // once the budget is spent; taken by the sampling thread), and whether
  // the answer has begun for the grammar (the space after the marker is
  // not the answer's).
  std::optional<ThinkingTracker> thinking;
  std::deque<int32_t> forced;
  std::vector<int32_t> close_tokens;
  bool close_forced = false;
  bool answer_begun = true;
  // An embedding request (GenerateRequest::pooling): the sum of the prompt
  // rows' final hidden states so far (mean; in token order, so a chunked or
  // batched prompt sums to the same bits) or the last row (last).
  Pooling pooling;
  bool normalize;
  std::vector<double> hidden_sum;
  int32_t num_hidden_rows = 0;
};

}  // namespace kvlm
