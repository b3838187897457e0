// The OpenAI completions and chat-completions protocol as plain data: request
// parsing and validation, and the JSON of responses, stream chunks and
// errors. No HTTP and no engine here (kvlm serve and kvlm router use it).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/sampling_params.h"
#include "kv/kv_policy.h"

namespace kvlm::constrain {
class Program;
class GrammarCache;
}  // namespace kvlm::constrain

namespace kvlm::openai {

using Json = nlohmann::ordered_json;

// A request that fails validation: the HTTP status, the message and the
// offending parameter, as OpenAI reports them.
struct RequestError {
  RequestError(int status_, std::string message_, std::optional<std::string> param_ = std::nullopt,
               std::string type_ = "invalid_request_error")
      : status(status_), message(std::move(message_)), param(std::move(param_)), type(std::move(type_)) {}
  int status;
  std::string message;
  std::optional<std::string> param;
  std::string type;
  std::optional<std::string> code;
};

// A request's structured output (response_format, guided_*) as read, not
// yet compiled: compile_grammars() makes it a grammar.
struct ConstraintSpec {
  enum class Kind { kJsonObject, kJsonSchema, kRegex, kChoice };
  Kind kind = Kind::kJsonObject;
  std::string param;                 // the field an error names ("response_format.json_schema.schema")
  Json schema;                       // kJsonSchema: an object or a boolean
  bool strict = false;               // kJsonSchema: refuse what the grammar cannot enforce
  std::string pattern;               // kRegex
  std::vector<std::string> choices;  // kChoice: non-empty strings
};

// Parameters shared by both endpoints, already validated.
struct GenerationOptions {
  std::string model;
  SamplingParams sampling;             // OpenAI defaults: temperature 1, top_p 1, no top-k/min-p
  // Which of these the request set: the others may take the model's
  // defaults instead (ServerConfig::sampling_defaults).
  struct Given {
    bool temperature = false, top_p = false, top_k = false, min_p = false, repetition_penalty = false;
  } given;
  // unset: up to the context (chat) / 16 (completions); completions take 0
  // (nothing generated: with echo, the prompt scored).
  std::optional<int32_t> max_tokens;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;          // stream_options.include_usage
  bool ignore_eos = false;             // extension
  bool speculative = true;             // extension: false turns speculative decoding off for this request
  std::optional<std::string> cache_salt;  // extension (vLLM): separates prefix-cache namespaces
  // < 0: no logprobs; else the number of top log-probabilities per token
  // (completions: `logprobs`; chat: `logprobs: true` with `top_logprobs`).
  int32_t logprobs = -1;
  // Extensions: this request's KV budget and eviction policy (unset: the
  // server's --kv-budget/--kv-policy/--kv-sinks/--kv-shift). kv_budget 0:
  // unbounded.
  std::optional<int32_t> kv_budget;
  std::optional<KvPolicyKind> kv_policy;
  std::string kv_learned_name;  // kv_policy "learned:NAME": the server's learned policy of that name
  std::optional<int32_t> kv_sinks;
  std::optional<int32_t> kv_recent;
  std::optional<bool> kv_shift;
  // Extension (docs/kv-chunks.md): the share of the request's reused KV
  // chunk tokens recomputed in its context, 0..1; unset: the server's
  // --kv-blend-recompute.
  std::optional<double> kv_blend_recompute;
  // Choices (OpenAI's `n`, 1..16) and, completions only, the candidates they
  // are picked from (`best_of`, n..16; more than n only without streaming):
  // candidate i samples with seed + i, the n with the highest sum of token
  // log-probabilities are returned.
  int32_t n = 1;
  int32_t best_of = 1;
  // Structured output (response_format.h): what the request asked for, and
  // the grammar compile_grammars() made of it, which the output must follow;
  // null: unconstrained.
  std::optional<ConstraintSpec> constraint_spec;
  std::shared_ptr<const constrain::Program> constraint;
  // Extensions kvlm router uses (docs/router.md). return_token_ids: every
  // choice carries `token_ids`, the ids generated since its previous chunk
  // (streamed) or all of them, and its first chunk (or the choice) the
  // prompt's `prompt_token_ids`.
  bool return_token_ids = false;
  // The prompt as token ids, used instead of rendering `prompt`/`messages`.
  std::optional<std::vector<int32_t>> prompt_token_ids;
  // A resumed stream (engine.h, GenerateRequest::num_replayed): the output
  // the client already has; generation goes on after it. Needs stream: true
  // and one choice; max_tokens counts these tokens too.
  std::vector<int32_t> resume_token_ids;
};
constexpr int32_t kMaxChoices = 16;

// A completions prompt: text, or token ids.
using Prompt = std::variant<std::string, std::vector<int32_t>>;
// [begin, end) of a prompt: bytes of a text prompt, or token offsets.
struct PromptSpan {
  size_t begin = 0;
  size_t end = 0;
  bool operator==(const PromptSpan&) const = default;
};
// Prompts times best_of (the candidates one request may ask for).
constexpr int32_t kMaxCandidates = 256;

struct CompletionRequest {
  GenerationOptions options;
  // The response starts with the prompt (and, with logprobs, the prompt
  // tokens' log-probabilities: how evaluation harnesses score text; with
  // max_tokens 0 nothing is generated).
  bool echo = false;
  // One prompt, or several (OpenAI's list `prompt`): choice k of prompt i
  // is the response's choice i * n + k.
  std::vector<Prompt> prompts;
  // Fill-in-the-middle (OpenAI's legacy `suffix`): each text prompt is the
  // code before the gap, this the code after it; the model writes the middle.
  std::optional<std::string> suffix;
  // KV chunks (`kv_chunks`, docs/kv-chunks.md) of the one prompt: spans
  // whose KV may be reused wherever they stand, ascending, not overlapping,
  // not empty, inside the prompt. A text prompt's are in bytes (the
  // request's character offsets, Unicode code points, converted), a token-id
  // prompt's in tokens.
  std::vector<PromptSpan> kv_chunks{};
};

// tool_choice: whether the model may (auto), must (required, named) or must
// not (none) call tools; named: that function.
struct ToolChoice {
  enum class Kind { kAuto, kNone, kRequired, kNamed };
  Kind kind = Kind::kAuto;
  std::string name;  // kNamed
};

struct ChatRequest {
  GenerationOptions options;
  // Array of {role, content: string or null, ...}, content parts joined;
  // assistant messages may carry tool_calls, tool messages a tool_call_id.
  Json messages;
  Json template_extra;      // tools, documents, chat_template_kwargs... for the template
  // The validated `tools` array ({type: "function", function: {name, description?,
  // parameters?}}); null when absent or empty.
  Json tools;
  ToolChoice tool_choice;
  bool parallel_tool_calls = true;
  // The request used the legacy `functions` / `function_call` fields (held
  // in tools / tool_choice): the answer is one `message.function_call`.
  bool legacy_functions = false;
  // Thinking models (chat/reasoning.h). reasoning_format (llama.cpp's
  // field): "separate" (or "deepseek", "auto") answers the thinking apart
  // in reasoning_content, "none" leaves it in the content; unset: the
  // server's --reasoning-format. thinking_budget (an extension): the most
  // tokens the model may think before its close marker is forced.
  std::optional<bool> separate_reasoning;
  std::optional<int32_t> thinking_budget;
  // KV chunks (docs/kv-chunks.md): the text of each content part marked
  // `"kv_chunk": true`, or of each message so marked (its parts' marks then
  // say nothing more), in message order, with its message's index in
  // `messages`. chat_render.h finds them in the rendered prompt.
  struct KvChunk {
    size_t message = 0;
    std::string text{};
  };
  std::vector<KvChunk> kv_chunks{};
};

// Parse and validate a request body. Nothing is compiled here: structured
// output is read into options.constraint_spec, a strict tool's schema is
// kept as it came; compile_grammars() compiles them.
std::variant<CompletionRequest, RequestError> parse_completion_request(const Json& body);
std::variant<ChatRequest, RequestError> parse_chat_request(const Json& body);
// Compiles the grammars a parsed request asks for: its structured output
// into options.constraint, and, for chat, each strict tool's schema (strict
// promises arguments valid against it, so a keyword the grammar cannot
// enforce is refused). Through `grammars` when given: the server's budget
// and cache (constrain/grammar_cache.h), whose refusals for memory or time
// (constrain::GrammarLimitError) are thrown for the route to answer. A
// schema or pattern the compiler refuses is a 400 naming its field.
std::optional<RequestError> compile_grammars(CompletionRequest& r, constrain::GrammarCache* grammars = nullptr);
std::optional<RequestError> compile_grammars(ChatRequest& r, constrain::GrammarCache* grammars = nullptr);
// Only what makes a chat request's prompt (messages, tools, tool_choice,
// template variables), options left at their defaults: a router predicting
// the prompt does not check sampling or structured-output fields.
std::variant<ChatRequest, RequestError> parse_chat_prompt(const Json& body);

// /v1/embeddings: `input` as a completions `prompt` (a string, token ids,
// or a list of either), `encoding_format` float or base64; `dimensions` is
// refused (one size per model), `user` accepted.
constexpr int32_t kMaxEmbeddingInputs = 2048;  // OpenAI's limit
struct EmbeddingsRequest {
  std::vector<Prompt> inputs;
  std::string model;  // "": the served model
  bool base64 = false;
};
std::variant<EmbeddingsRequest, RequestError> parse_embeddings_request(const Json& body);

// /tokenize: {"content": "text", "add_special": true, "parse_special": true, "with_pieces": false}.
struct TokenizeRequest {
  std::string content;
  bool add_special = true;
  bool parse_special = true;
  bool with_pieces = false;
};
std::variant<TokenizeRequest, RequestError> parse_tokenize_request(const Json& body);
// /detokenize: {"tokens": [ids]}, every id in [0, vocab_size).
std::variant<std::vector<int32_t>, RequestError> parse_detokenize_request(const Json& body, int32_t vocab_size);

// Responses. `finish_reason` is "stop" or "length".
struct Usage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_tokens = 0;
};
Json usage_json(const Usage& u);

// One generated token's log-probabilities, with the tokens as raw bytes.
struct LogprobToken {
  std::string bytes;  // the token's bytes (may be part of a UTF-8 character)
  float logprob = 0.f;
};
struct LogprobEntry {
  LogprobToken chosen;  // logprob NaN: none (an echoed prompt's first token; JSON null)
  std::vector<LogprobToken> top;  // most likely first
  // Where the token's text starts in the output (completions' text_offset);
  // unset: right after the previous token's bytes. An echoed prompt's tokens
  // set it: a BOS token or SentencePiece's leading space are not in its text.
  std::optional<int64_t> text_offset;
};
// A token's text in JSON: its bytes if they are valid UTF-8, else vLLM's
// "bytes:\xNN..." spelling (JSON strings cannot hold broken UTF-8).
std::string token_text(const std::string& bytes);
// The `logprobs` object of a completion choice (tokens, token_logprobs,
// top_logprobs, text_offset); text_offset counts bytes of the output from
// `*offset`, which is advanced past these tokens (streams carry it along).
Json completion_logprobs(const std::vector<LogprobEntry>& entries, int64_t* offset);
// The `logprobs` object of a chat choice: {"content": [{token, logprob, bytes, top_logprobs}]}.
Json chat_logprobs(const std::vector<LogprobEntry>& entries);
Json completion_response(const std::string& id, int64_t created, const std::string& model, const std::string& text,
                         const std::string& finish_reason, const Usage& usage, Json logprobs = nullptr);
Json chat_response(const std::string& id, int64_t created, const std::string& model, const std::string& text,
                   const std::string& finish_reason, const Usage& usage, Json logprobs = nullptr);
// One entry of a response's `choices` (n > 1: several, indices 0..n-1).
Json completion_choice(int32_t index, const std::string& text, const std::string& finish_reason,
                       Json logprobs = nullptr);
Json chat_choice(int32_t index, const std::string& text, const std::string& finish_reason, Json logprobs = nullptr);
// How a chat choice's calls are answered: `tool_calls` (an array of {id,
// type: "function", function: {name, arguments}}, finish_reason
// "tool_calls"), or for a request with the legacy `functions` its first call
// as `function_call` ({name, arguments}, finish_reason "function_call"). A
// call cut off by max_tokens ends "length" either way.
enum class CallStyle { kToolCalls, kFunctionCall };
// A chat choice whose message carries calls; content null when empty.
Json chat_tool_calls_choice(int32_t index, const std::string& content, Json tool_calls, Json logprobs,
                            CallStyle style, bool cut);
// A whole response of the given choices.
Json choices_response(const std::string& id, int64_t created, const std::string& model, bool chat, Json choices,
                      const Usage& usage);
// Stream chunks; finish_reason empty while the stream goes on. `role` is set on
// each choice's first chat chunk only; `index` names the choice.
Json completion_chunk(const std::string& id, int64_t created, const std::string& model, const std::string& text,
                      const std::string& finish_reason, Json logprobs = nullptr, int32_t index = 0);
Json chat_chunk(const std::string& id, int64_t created, const std::string& model, const std::string& text,
                const std::string& finish_reason, bool with_role, Json logprobs = nullptr, int32_t index = 0);
// A chat chunk whose delta holds `tool_calls` (OpenAI's stream shape: per
// call, {index, id, type, function: {name, arguments: ""}} first, then
// {index, function: {arguments: fragment}}).
Json chat_tool_calls_chunk(const std::string& id, int64_t created, const std::string& model, Json tool_calls,
                           int32_t index = 0);
// The legacy style: a delta with `function_call` ({name, arguments: ""},
// then {arguments}).
Json chat_function_call_chunk(const std::string& id, int64_t created, const std::string& model, Json function_call,
                              int32_t index = 0);
// The final usage-only chunk of a stream with include_usage.
Json usage_chunk(const std::string& id, int64_t created, const std::string& model, bool chat, const Usage& usage);

Json error_json(const RequestError& e);

// "cmpl-<24 hex>" / "chatcmpl-<24 hex>".
std::string new_id(const char* prefix);

}  // namespace kvlm::openai
