// Engine::Live: the engine thread's state for one request (sampler,
// output, statistics). Internal to src/engine/.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "engine/engine.h"
#include "engine/output_processor.h"
#include "engine/spec/speculative.h"
#include "runner/sampler.h"
#include "tokenizer/tokenizer.h"

namespace kvlm {

struct Engine::Live {
  Live(std::shared_ptr<RequestStream> s, const Tokenizer& tok, const GenerateRequest& g, double now)
      : stream(std::move(s)), sampler(g.sampling), output(tok, g), arrival_s(now),
        deadline_s(g.timeout_s > 0 ? now + g.timeout_s : 0), timeout_s(g.timeout_s), logprobs(g.logprobs),
        next_prompt_position(g.prompt_logprobs ? g.prompt_logprobs_from : 0),
        speculative(g.speculative && g.pooling == Pooling::kNone), pooling(g.pooling), normalize(g.normalize),
        lora(g.lora) {}
  std::shared_ptr<RequestStream> stream;
  Sampler sampler;
  // Its text, grammar and thinking section (OutputProcessor).
  SeqOutput output;
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
  // Speculative decoding: whether it proposes, and its adaptive K (nullopt
  // with a fixed --spec-tokens).
  bool speculative;
  std::optional<SpecController> spec;
  // An embedding request (GenerateRequest::pooling): the sum of the prompt
  // rows' final hidden states so far (mean; in token order, so a chunked or
  // batched prompt sums to the same bits) or the last row (last).
  Pooling pooling;
  bool normalize;
  std::vector<double> hidden_sum;
  int32_t num_hidden_rows = 0;
  // Kept alive while the request runs (the scheduler's Request points at it).
  std::shared_ptr<const LoraAdapter> lora;
  // A KV chunk's companion (Engine::queue_companions): computes the chunk
  // alone for the request it names, which waits for it. Counted nowhere.
  std::optional<RequestId> companion_of;
  std::optional<size_t> companion_chunk;  // which of its chunks
};

}  // namespace kvlm
