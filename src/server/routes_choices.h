// What the generation routes share between their steps: the request as
// validated, the engine's streams of its choices, and the two ways of
// answering (one JSON body, an SSE stream). Internal to server/.
//
// A request with n choices (best_of candidates) is one engine submit_n():
// candidate i samples with seed + i, so it equals the single request with
// that seed (docs/server.md "n and best_of").
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <httplib.h>

#include "chat/reasoning.h"
#include "engine/engine.h"
#include "server/openai/protocol.h"
#include "server/routes.h"

namespace kvlm {

class AnswerWriter;
class Tokenizer;

// A request after parsing, with its prompts tokenized.
struct Generation {
  bool chat = false;
  std::string id;
  int64_t created = 0;
  std::string model;  // the name the answer gives: the one asked for, or the served model's
  openai::GenerationOptions options;
  // One prompt (chat; completions' single prompt) or several (a list
  // `prompt`): choice k of prompt i answers as choice i * n + k.
  std::vector<std::vector<int32_t>> prompts{};
  bool echo = false;                  // completions: the response starts with the prompt
  std::vector<std::string> prompt_texts{};  // what echo repeats, per prompt
  // max_tokens 0 (completions): nothing is generated. The engine runs the
  // prompt with one token to sample, which the answer leaves out: with echo
  // and logprobs, the prompt scored.
  bool prompt_only = false;
  // Chat with tools (tool_choice other than none): the output is parsed for
  // calls in this format; parallel false keeps the first call only; the
  // tools' names complete a name cut off by max_tokens.
  struct ToolCalls {
    ToolCallFormat format;
    bool parallel;
    openai::CallStyle style = openai::CallStyle::kToolCalls;
    std::vector<std::string> names{};
  };
  std::optional<ToolCalls> tool_calls{};
  // A thinking model's output (chat/reasoning.h): the thinking is answered
  // apart from the answer (reasoning_content). `opened`: the prompt opened
  // the thinking section, so the output starts inside it.
  struct Reasoning {
    ReasoningMarkers markers;
    bool opened = false;
  };
  std::optional<Reasoning> reasoning{};
  // What the engine does about the thinking section (a grammar after it, a
  // budget, a forced open); nullopt: nothing.
  std::optional<GenerateRequest::Thinking> thinking{};
  // The grammar the output must follow (tool_choice required/named); null: none.
  std::shared_ptr<const constrain::Program> constraint{};
  // Another API's answer (answer_writer.h: Anthropic Messages, OpenAI
  // Responses); null: OpenAI chat or completions. Shared: a Generation is
  // copied into the stream's provider, which httplib keeps copyable.
  std::shared_ptr<AnswerWriter> writer{};
};

// A request in the engine: one stream per candidate, prompt-major (prompt
// i's candidates at i * best_of ..), each prompt's in seed order.
struct Submitted {
  std::vector<std::shared_ptr<RequestStream>> streams;
  int32_t num_candidates = 1;  // per prompt: best_of (or n)
  std::vector<int32_t> num_prompt;  // each prompt's tokens (a resumed stream's replayed output apart)
  int32_t num_replayed = 0;  // GenerationOptions::resume_token_ids: output the client has already
  std::vector<std::vector<int32_t>> prompt_tokens;  // return_token_ids only: each prompt's ids
  // echo: each prompt's first token (nothing predicts it).
  std::vector<std::optional<int32_t>> echoed_first;
  size_t prompt_of(size_t stream) const { return stream / static_cast<size_t>(num_candidates); }
};

// routes_generate.cpp: a chat request body parsed (its response_format
// compiled through ctx.grammars), or nullopt after answering its refusal.
std::optional<openai::ChatRequest> parse_chat(ServerContext& ctx, const openai::Json& body, httplib::Response& res);
// routes_generate.cpp: the generation of a request that goes through the
// chat template (chat completions; other front ends will make their
// requests a ChatRequest too), or nullopt after answering its error
// (a model not served, no template, a prompt too long, a bad tool schema).
// `id` names the answer ("chatcmpl-...").
std::optional<Generation> chat_generation(ServerContext& ctx, openai::ChatRequest r, std::string id,
                                          httplib::Response& res);

// routes_submit.cpp: checks `gen` against the context, submits its choices
// and answers (whole or streamed); errors are answered too.
void run_generation(ServerContext& ctx, Generation gen, const httplib::Request& req, httplib::Response& res);

std::string reason_name(std::optional<FinishReason> r);
// An echoed prompt's text as the detokenizer writes it, and where each
// token's text starts in it: a leading BOS adds nothing, control tokens their
// text, SentencePiece's first piece no leading space; so a text prompt's
// echo is its own text and a scorer finds a continuation at the offset where
// its text starts. Throws Error(kInvalidArgument) for an id outside the
// vocabulary.
struct EchoText {
  std::string text;
  std::vector<int64_t> offsets;  // one per id
};
EchoText echo_text(const Tokenizer& tok, std::span<const int32_t> ids);
// One SSE event of `j` (dump_json: a byte token becomes U+FFFD).
std::string sse(const openai::Json& j);
// The `logprobs` JSON of a choice or a chunk: the echoed first token, the
// prompt's other tokens (echo), then the generated ones. `offset`:
// completions' text_offset, carried across a stream's chunks; `prompt`: the
// choice's prompt (whose text echo repeats).
openai::Json logprobs_json(const ServerContext& ctx, const Generation& gen, std::optional<int32_t> echoed_first,
                           const std::vector<SampledLogprobs>& prompt_lps, const std::vector<SampledLogprobs>& lps,
                           int64_t* offset, size_t prompt);
// prompt_tokens of every prompt once, completion_tokens of every candidate
// (best_of included, as OpenAI bills; none for prompt_only), cached tokens
// as each prompt's first candidate saw them.
openai::Usage total_usage(const Generation& gen, const Submitted& sub);
// Ends every candidate still running (a client that left).
void cancel_all(Engine& engine, const Submitted& sub);

// One candidate's whole output.
struct Candidate {
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<SampledLogprobs> logprobs, prompt_logprobs;
  std::optional<FinishReason> reason;
  std::optional<Error> error;
  double sum_logprobs() const {
    double sum = 0;
    for (const SampledLogprobs& lp : logprobs) sum += lp.chosen.logprob;
    return sum;
  }
};
// routes_choices.cpp: reads every candidate to its end; nullopt (every
// candidate cancelled) when the client hung up meanwhile.
std::optional<std::vector<Candidate>> collect(ServerContext& ctx, const Generation& gen, const Submitted& sub,
                                              const httplib::Request& req);

// routes_collect.cpp: waits for every candidate and answers one JSON body
// with the best n (all of them in order when best_of == n).
void answer_whole(ServerContext& ctx, const Generation& gen, const Submitted& sub, const httplib::Request& req,
                  httplib::Response& res);
// routes_stream.cpp: answers an SSE stream of every choice's chunks as they
// come, interleaved and tagged with their index. Holds `ticket` until the end.
void answer_stream(ServerContext& ctx, Generation gen, Submitted sub,
                   std::shared_ptr<InFlightRequests::Ticket> ticket, httplib::Response& res);
// routes_front.cpp: answers through gen.writer (one choice), whole or
// streamed. Holds `ticket` until a stream's end.
void answer_with_writer(ServerContext& ctx, Generation gen, Submitted sub,
                        std::shared_ptr<InFlightRequests::Ticket> ticket, const httplib::Request& req,
                        httplib::Response& res);
// A resumed stream whose replayed output already reached max_tokens: its last
// chunk (finish_reason "length"), the usage chunk if asked for, [DONE].
void answer_resumed_at_length(const Generation& gen, int32_t num_prompt, httplib::Response& res);

}  // namespace kvlm
