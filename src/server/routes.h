// Route handlers of the server, one function per route, and what they share.
// Internal to server/: server.cpp registers them with the HTTP transport.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string_view>
#include <string>
#include <vector>

#include "wire/http/message.h"

#include "chat/reasoning.h"
#include "chat/tool_calls.h"
#include "common/hash.h"
#include "sched/request.h"
#include "server/in_flight.h"
#include "server/lora_registry.h"
#include "server/metrics_text.h"
#include "server/response_store.h"
#include "model/rank_head.h"
#include "server/sampling_defaults.h"
#include "server/slots.h"
#include "tokenizer/rerank_prompt.h"
#include "wire/http/front.h"
#include "wire/openai/protocol.h"

namespace kvlm {

class Engine;
struct ModelConfig;
class Model;
class ChatTemplate;
class Error;
class HeapTrimmer;
class MemoryBudget;

namespace constrain {
class GrammarCache;
class GrammarLimitError;
}  // namespace constrain

struct ServerContext {
  Engine& engine;
  // The names it serves the model under (--served-model-name, repeatable):
  // the first is its own (metrics, the chat page), the others aliases.
  std::vector<std::string> model_names;
  std::unique_ptr<ChatTemplate> chat_template{};  // null: the model has none (chat requests get 400)
  std::string chat_template_error{};            // why it is null
  // How the template's model writes tool calls, and whether the template
  // renders `tools` itself (else a system prompt describes them).
  ToolCallFormat tool_format = ToolCallFormat::kGeneric;
  bool template_renders_tools = false;
  // The thinking markers of the template's model (chat/reasoning.h; nullopt:
  // it does not think), and whether its thinking is answered apart by
  // default (--reasoning-format separate) or left in the content (none).
  std::optional<ReasoningMarkers> reasoning_markers{};
  bool separate_reasoning = true;
  // /v1/embeddings: how a prompt's hidden states are pooled (--pooling, else
  // the model's pooling_type, else the last token's); kNone with the reason
  // in pooling_error when the model's pooling is one kvlm does not have.
  Pooling pooling = Pooling::kLast;
  // The model's default sampling for the fields a request leaves unset
  // (empty with --generation-config none).
  SamplingDefaults sampling_defaults{};
  std::string pooling_error{};
  // /rerank, /v1/score: the reranker's head and prompt format; null with the
  // reason in rank_error for a model that is not a reranker.
  std::unique_ptr<RankHead> rank_head{};
  std::string rank_error{};
  RerankFormat rerank_format{};
  // Responses stored for GET /v1/responses/{id} and previous_response_id.
  ResponseStore responses{};
  InFlightRequests in_flight{};                 // generation requests not yet answered in full
  // A prompt text longer than this many bytes cannot fit the context (no
  // token covers more bytes than the longest vocabulary piece), so it is
  // refused before it is tokenized: a 32 MiB prompt costs nothing.
  size_t max_prompt_bytes = SIZE_MAX;
  // --kv-chunks-auto (ServerConfig::kv_chunks_auto): chat's user and tool
  // messages of at least this many tokens are KV chunks too; 0: off.
  int32_t kv_chunks_auto = 0;
  std::chrono::milliseconds sse_heartbeat{1000};  // ServerConfig::sse_heartbeat
  int max_queued_requests = -1;                   // ServerConfig::max_queued_requests
  double request_timeout_s = 0;                   // ServerConfig::request_timeout_s
  int retry_after_s = 1;                          // ServerConfig::retry_after_s
  // The queue check and the submission happen under it, so concurrent
  // requests cannot all pass a check that only one of them fits.
  std::mutex admission_mu{};
  std::atomic<int64_t> num_rejected_queue{0};
  // Names this process for KV-event readers (a restarted server is another
  // instance: its cache starts empty).
  std::string instance_id{};
  // Every grammar requests compile (structured output, tools): one memory
  // budget, bounded compilations at once, a cache (--grammar-mem ...).
  std::unique_ptr<constrain::GrammarCache> grammars{};
  // What the requests being handled hold of --body-mem (their parsed bodies).
  std::unique_ptr<MemoryBudget> body_memory{};
  std::atomic<int64_t> num_rejected_body_memory{0};
  const HeapTrimmer* heap_trimmer = nullptr;  // the server's (for /metrics)
  // The API keys (their per-key metrics); null in tests without a server.
  const ApiKeyring* keys = nullptr;
  // The transport's counters (/metrics); null until the server is made.
  const http::ServerStats* http_stats = nullptr;
  std::vector<MetricsCompat> metrics_compat{};  // ServerConfig::metrics_compat
  // The LoRA adapters served by name beside the base (docs/lora.md), and
  // how one is read from a path (null: the server loads none at run time).
  std::unique_ptr<LoraRegistry> loras = std::make_unique<LoraRegistry>(0);
  std::function<std::shared_ptr<const LoraAdapter>(const std::string& path)> load_lora{};
  // llama.cpp's slots (slots.h, routes_slots.cpp): one per --max-seqs, and
  // ServerConfig's slot_save_path ("": no slot files) and slot_namespace.
  std::unique_ptr<SlotTable> slots{};
  std::string slot_save_path{};
  Hash128 slot_namespace{};
};

// Takes what parsing the request's body may allocate (parsed_json_bytes)
// from ctx.body_memory, for the caller to give back when the handler is
// done; 0 and an answer (413 past the whole budget, 503 + Retry-After
// body_memory_exhausted while others hold it) when it does not fit.
int64_t take_body_memory(ServerContext& ctx, const http::Request& req, http::Response& res);
// Answers a grammar refused for what it costs: 400 on `param` when it alone
// is too large, else 503 with Retry-After and a code naming the limit
// (grammar_memory_exhausted, grammar_compilations_busy).
void send_grammar_refusal(const ServerContext& ctx, http::Response& res, const constrain::GrammarLimitError& e,
                          const std::string& param);
// Answers 503 with Retry-After when a generation request of `num_choices`
// would wait beyond --max-queued-requests; call under ctx.admission_mu.
bool refuse_when_queue_full(ServerContext& ctx, int32_t num_choices, http::Response& res);
// What a request's `model` names: the base (under the name the answer
// gives) or one of its LoRA adapters, held for the request's life.
struct ServedModel {
  std::string name;
  std::shared_ptr<const LoraAdapter> lora;  // null: the base
};
// The model a request names must be one this server serves (any of its
// names, or a LoRA adapter's); none named is the served model. Answers 404
// model_not_found and returns nullopt otherwise.
std::optional<ServedModel> served_model(const ServerContext& ctx, const std::string& asked, http::Response& res);
// 400 unsupported_parameter on `param`: the model has no FIM tokens.
void send_no_fim_tokens(http::Response& res, const std::string& param);
// llama.cpp's POST /infill (routes_infill.cpp).
void handle_infill(ServerContext& ctx, const http::Request& req, http::Response& res);
void handle_completions(ServerContext& ctx, const http::Request& req, http::Response& res);
void handle_chat_completions(ServerContext& ctx, const http::Request& req, http::Response& res);
// POST /v1/messages, Anthropic's Messages API (routes_messages.cpp).
void handle_messages(ServerContext& ctx, const http::Request& req, http::Response& res);
// POST /v1/responses, GET and DELETE /v1/responses/{id}, GET
// /v1/responses/{id}/input_items: OpenAI's Responses API (routes_responses.cpp).
void handle_responses(ServerContext& ctx, const http::Request& req, http::Response& res);
void handle_get_response(ServerContext& ctx, const http::Request& req, http::Response& res);
void handle_response_input_items(ServerContext& ctx, const http::Request& req, http::Response& res);
void handle_delete_response(ServerContext& ctx, const http::Request& req, http::Response& res);
void handle_models(ServerContext& ctx, const http::Request& req, http::Response& res);
// LoRA adapters (routes_lora.cpp): an adapter's /v1/models entry, and vLLM's
// POST /v1/load_lora_adapter, /v1/unload_lora_adapter.
openai::Json lora_model_json(const ServerContext& ctx, const LoraInfo& lora);
void handle_load_lora(ServerContext& ctx, const http::Request& req, http::Response& res);
void handle_unload_lora(ServerContext& ctx, const http::Request& req, http::Response& res);
// POST /v1/embeddings (routes_embeddings.cpp), and the pooling it uses:
// `flag` (--pooling mean|last) when given, else the model's pooling_type.
void set_pooling(ServerContext& ctx, const ModelConfig& model, const std::string& flag);
void handle_embeddings(ServerContext& ctx, const http::Request& req, http::Response& res);
// How run_pooled pools each prompt's final hidden states.
struct PooledRun {
  Pooling pooling = Pooling::kLast;
  bool normalize = true;  // L2 (embeddings); a reranker's head wants the raw state
  std::shared_ptr<const LoraAdapter> lora{};  // the adapter the prompts run with (null: the base)
};
// Each prompt as an embedding request (routes_embeddings.cpp), batched with
// whatever else runs, 64 at a time, under the queue limit and the drain:
// their pooled vectors in order, or nullopt after answering the error (503
// shutting down, queue full, a failed request) or when the client left.
std::optional<std::vector<std::vector<float>>> run_pooled(ServerContext& ctx, std::vector<std::vector<int32_t>> prompts,
                                                          const PooledRun& run, const http::Request& req,
                                                          http::Response& res);
// POST /rerank, /v1/rerank and vLLM's /v1/score (routes_rerank.cpp), for a
// reranker model (ctx.rank_head); others get 400 with ctx.rank_error.
void handle_rerank(ServerContext& ctx, const http::Request& req, http::Response& res);
void handle_score(ServerContext& ctx, const http::Request& req, http::Response& res);
// ctx.rank_head and the rerank format from the model, or ctx.rank_error.
void set_reranker(ServerContext& ctx, const Model& model);
// GET /v1/models/{id}: one served name's model object, or 404 model_not_found.
void handle_model(ServerContext& ctx, const http::Request& req, http::Response& res);
void handle_health(ServerContext& ctx, const http::Request& req, http::Response& res);
void handle_props(ServerContext& ctx, const http::Request& req, http::Response& res);  // llama.cpp's GET /props
// SGLang's worker API, for its router and vLLM's (routes_worker_info.cpp).
void handle_server_info(ServerContext& ctx, const http::Request& req, http::Response& res);
void handle_model_info(ServerContext& ctx, const http::Request& req, http::Response& res);
void handle_get_load(ServerContext& ctx, const http::Request& req, http::Response& res);
void handle_flush_cache(ServerContext& ctx, const http::Request& req, http::Response& res);
void handle_metrics(ServerContext& ctx, const http::Request& req, http::Response& res);
// POST /tokenize: {"content"} (llama.cpp's; vLLM's "prompt" too) or, through
// handle_tokenize_messages, {"messages", ...} rendered as chat would be.
void handle_tokenize(ServerContext& ctx, const http::Request& req, http::Response& res);
// A chat request's prompt without generating (routes_prompt.cpp): POST
// /v1/messages/count_tokens, POST /apply-template, /tokenize with messages.
void handle_count_tokens(ServerContext& ctx, const http::Request& req, http::Response& res);
void handle_apply_template(ServerContext& ctx, const http::Request& req, http::Response& res);
void handle_tokenize_messages(ServerContext& ctx, const openai::Json& body, http::Response& res);
// vLLM's POST /v1/chat/completions/render ({"token_ids"}) and
// /v1/completions/render (one {"token_ids"} per prompt).
void handle_render_chat(ServerContext& ctx, const http::Request& req, http::Response& res);
void handle_render_completion(ServerContext& ctx, const http::Request& req, http::Response& res);
void handle_detokenize(ServerContext& ctx, const http::Request& req, http::Response& res);
void handle_status(ServerContext& ctx, const http::Request& req, http::Response& res);  // routes_web.cpp
void handle_kv_events(ServerContext& ctx, const http::Request& req, http::Response& res);  // routes_kv_events.cpp
// llama.cpp's GET /slots and POST /slots/{id}?action=save|restore|erase (routes_slots.cpp).
void handle_slots(ServerContext& ctx, const http::Request& req, http::Response& res);
void handle_slot_action(ServerContext& ctx, const http::Request& req, http::Response& res);

}  // namespace kvlm
