// What the generation routes share between their steps: the request as
// validated, the engine's streams of its choices, and the two ways of
// answering (one JSON body, an SSE stream). Internal to server/.
//
// A request with n choices (best_of candidates) is one engine submit_n():
// candidate i samples with seed + i, so it equals the single request with
// that seed (README "n and best_of").
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <httplib.h>

#include "engine/engine.h"
#include "server/openai/protocol.h"
#include "server/routes.h"

namespace kvlm {

// A request after parsing, with its prompt tokenized.
struct Generation {
  bool chat;
  std::string id;
  int64_t created;
  openai::GenerationOptions options;
  std::vector<int32_t> prompt;
  bool echo = false;        // completions: the response starts with the prompt
  std::string prompt_text;  // what echo repeats
  // Chat with tools (tool_choice other than none): the output is parsed for
  // calls in this format; parallel false keeps the first call only.
  struct ToolCalls {
    ToolCallFormat format;
    bool parallel;
  };
  std::optional<ToolCalls> tool_calls;
  // The grammar the output must follow (tool_choice required/named); null: none.
  std::shared_ptr<const constrain::Program> constraint;
};

// A request in the engine: one stream per candidate, in seed order.
struct Submitted {
  std::vector<std::shared_ptr<RequestStream>> streams;
  int32_t num_prompt = 0;
  std::optional<int32_t> echoed_first;  // echo: the prompt's first token (nothing predicts it)
};

// routes_submit.cpp: checks `gen` against the context, submits its choices
// and answers (whole or streamed); errors are answered too.
void run_generation(ServerContext& ctx, Generation gen, const httplib::Request& req, httplib::Response& res);

std::string reason_name(std::optional<FinishReason> r);
// One SSE event of `j` (dump_json: a byte token becomes U+FFFD).
std::string sse(const openai::Json& j);
// The `logprobs` JSON of a choice or a chunk: the echoed first token, the
// prompt's other tokens (echo), then the generated ones. `offset`:
// completions' text_offset, carried across a stream's chunks.
openai::Json logprobs_json(const ServerContext& ctx, const Generation& gen, std::optional<int32_t> echoed_first,
                           const std::vector<SampledLogprobs>& prompt_lps, const std::vector<SampledLogprobs>& lps,
                           int64_t* offset);
// prompt_tokens once, completion_tokens of every candidate (best_of
// included, as OpenAI bills), cached tokens as the first candidate saw them.
openai::Usage total_usage(const Submitted& sub);
// Ends every candidate still running (a client that left).
void cancel_all(Engine& engine, const Submitted& sub);

// routes_collect.cpp: waits for every candidate and answers one JSON body
// with the best n (all of them in order when best_of == n).
void answer_whole(ServerContext& ctx, const Generation& gen, const Submitted& sub, const httplib::Request& req,
                  httplib::Response& res);
// routes_stream.cpp: answers an SSE stream of every choice's chunks as they
// come, interleaved and tagged with their index. Holds `ticket` until the end.
void answer_stream(ServerContext& ctx, Generation gen, Submitted sub,
                   std::shared_ptr<InFlightRequests::Ticket> ticket, httplib::Response& res);

}  // namespace kvlm
