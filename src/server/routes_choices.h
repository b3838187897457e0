// What the generation routes share between their steps: the request as
// validated, the engine's streams of its choices, and the one way every API
// answers them (answer_driver.cpp): a Producer that reads the streams as
// they fill, hands each event (streamed) or every candidate's whole output
// (not streamed) to the API's AnswerFormat, and charges the request's
// tokens once, at its end. Internal to server/.
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

#include "wire/http/message.h"

#include "chat/reasoning.h"
#include "engine/engine.h"
#include "server/routes.h"
#include "tokenizer/prompt_pieces.h"
#include "wire/openai/protocol.h"

namespace kvlm {

class AnswerWriter;
class Tokenizer;

// A request after parsing, with its prompts tokenized.
struct Generation {
  bool chat = false;
  std::string id;
  int64_t created = 0;
  std::string model;  // the name the answer gives: the one asked for, or the served model's
  std::shared_ptr<const LoraAdapter> lora{};  // the adapter `model` names (null: the base)
  openai::GenerationOptions options;
  // One prompt (chat; completions' single prompt) or several (a list
  // `prompt`): choice k of prompt i answers as choice i * n + k.
  std::vector<std::vector<int32_t>> prompts{};
  // KV chunks (docs/kv-chunks.md): prompt i's spans are prompt_chunks[i]
  // (none past its end), GenerateRequest::kv_chunks.
  std::vector<std::vector<TokenSpan>> prompt_chunks{};
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
  // Responses); null: OpenAI chat or completions. Shared: the answer's format
  // holds it while the Generation is kept by the route.
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
  // The slot the first candidate runs in (server/slots.h); null: none was free.
  std::unique_ptr<SlotTable::Claim> slot;
  size_t prompt_of(size_t stream) const { return stream / static_cast<size_t>(num_candidates); }
};

// routes_generate.cpp: a chat request body parsed (its response_format
// compiled through ctx.grammars), or nullopt after answering its refusal.
std::optional<openai::ChatRequest> parse_chat(ServerContext& ctx, const openai::Json& body, http::Response& res);
// routes_generate.cpp: the generation of a request that goes through the
// chat template (chat completions; other front ends will make their
// requests a ChatRequest too), or nullopt after answering its error
// (a model not served, no template, a prompt too long, a bad tool schema).
// `id` names the answer ("chatcmpl-...").
std::optional<Generation> chat_generation(ServerContext& ctx, openai::ChatRequest r, std::string id,
                                          http::Response& res);

// routes_kv_chunks.cpp (docs/kv-chunks.md): --kv-chunks-auto's chunks
// added to `r`: each user and tool message of at least ctx.kv_chunks_auto
// tokens whose text is not marked already (nothing with 0).
void add_auto_kv_chunks(const ServerContext& ctx, openai::ChatRequest& r);
// gen's last prompt gets these KV chunk spans (Generation::prompt_chunks).
void set_last_prompt_chunks(Generation& gen, std::span<const IdSpan> chunks);

// routes_submit.cpp: checks `gen` against the context, submits its choices
// and answers (whole or streamed); errors are answered too.
void run_generation(ServerContext& ctx, Generation gen, const http::Request& req, http::Response& res);

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
// Adds one event of a candidate's stream to its output (prompt_only: the
// token sampled after the prompt is not an answer's; the ending is "length").
void take_event(Candidate& c, const StreamEvent& ev, bool prompt_only);

// How one API writes a generation's answer. The driver calls, streamed:
// stream_start() once, stream_event() for each event of candidate `i` (an
// error or an abort included: the format answers them in its own way), then
// stream_end() with the request's usage once every candidate has ended (or
// stream_error() when answering itself failed); not streamed: whole() with
// every candidate's output and the usage.
class AnswerFormat {
 public:
  virtual ~AnswerFormat() = default;
  virtual std::string stream_start() { return {}; }
  virtual std::string stream_event(size_t i, const StreamEvent& ev) = 0;
  virtual std::string stream_end(const openai::Usage& usage) = 0;
  virtual std::string stream_error(const openai::RequestError& e) = 0;
  virtual void whole(const std::vector<Candidate>& candidates, const openai::Usage& usage, http::Response& res) = 0;
};

// routes_choices.cpp / routes_stream.cpp: OpenAI's chat completions and
// completions (n choices, best_of, logprobs, echo, tools, thinking).
std::unique_ptr<AnswerFormat> openai_format(const ServerContext& ctx, const Generation& gen, const Submitted& sub);
// routes_choices.cpp: OpenAI's whole answer, the best n candidates of each prompt.
void openai_whole(const ServerContext& ctx, const Generation& gen, const Submitted& sub,
                  const std::vector<Candidate>& candidates, const openai::Usage& usage, http::Response& res);
// routes_front.cpp: through gen.writer (Anthropic Messages, OpenAI
// Responses; one choice).
std::unique_ptr<AnswerFormat> writer_format(const ServerContext& ctx, const Generation& gen, const Submitted& sub);

// answer_driver.cpp: answers `sub` in the format `make_format` makes (of the
// answer's own copies of gen and sub), streamed or whole, as a Producer on
// `res`: no thread waits while the engine generates. Holds `flight` (the
// drain waits for it) and the request's key ticket until the answer has been
// written; the client hanging up cancels every candidate.
using FormatMaker = std::unique_ptr<AnswerFormat> (*)(const ServerContext&, const Generation&, const Submitted&);
void answer_generation(ServerContext& ctx, const http::Request& req, Generation gen, Submitted sub,
                       std::shared_ptr<InFlightRequests::Ticket> flight, FormatMaker make_format, http::Response& res);
// A resumed stream whose replayed output already reached max_tokens: its last
// chunk (finish_reason "length"), the usage chunk if asked for, [DONE].
void answer_resumed_at_length(const Generation& gen, int32_t num_prompt, http::Response& res);

// Waits (blocking its handler thread) for every stream of `sub` to end,
// cancelling them all if the client hangs up meanwhile (nullopt then): the
// embeddings' wait, whose work is one forward pass per input.
std::optional<std::vector<Candidate>> wait_for_all(ServerContext& ctx, const Submitted& sub, const http::Request& req);

}  // namespace kvlm
