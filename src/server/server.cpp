#include "server/server.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <thread>

#include <unistd.h>

#include <fmt/format.h>

#include "chat/chat_prompt.h"
#include "common/error.h"
#include "common/heap_trimmer.h"
#include "common/log.h"
#include "common/memory_budget.h"
#include "constrain/grammar_cache.h"
#include "engine/engine.h"
#include "kvstore/disk_files.h"
#include "kvstore/redis_cluster.h"
#include "model/model.h"
#include "server/metrics_text.h"
#include "server/routes.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "wire/anthropic/models.h"
#include "wire/http/body_memory.h"
#include "wire/openai/json_text.h"

namespace kvlm {

struct Server::Impl {
  Impl(Engine& engine, ServerConfig c)
      : config(std::move(c)),
        ctx{.engine = engine,
            .model_names = config.model_names,
            .sse_heartbeat = config.sse_heartbeat,
            .max_queued_requests = config.max_queued_requests,
            .request_timeout_s = config.request_timeout_s,
            .retry_after_s = config.retry_after_s} {
    ctx.separate_reasoning = config.separate_reasoning;
    ctx.metrics_compat = config.metrics_compat;
    ctx.loras = std::make_unique<LoraRegistry>(config.max_loras);
    for (const ServedLora& lora : config.loras) ctx.loras->add(lora);
    ctx.load_lora = config.load_lora;
  }
  ServerConfig config;
  ServerContext ctx;
  // Gives back what a burst freed (common/heap_trimmer.h): past 32 MiB held
  // free, checked each second.
  HeapTrimmer heap_trimmer{32 << 20, std::chrono::seconds(1)};
  RouteTable routes;
  FrontDoor door{load_api_keys(config.api_keys, config.api_key_file), config.metrics_key};
  std::unique_ptr<http::HttpServer> http;  // made once the routes are in place
  int port = -1;

  // The model's chat template (or --chat-template-file's) and what it says
  // about tool calls and thinking; a model without one serves completions.
  void load_template(const Engine& engine);
  void open_slots(const Engine& engine);
  void add_routes();
};

namespace {

using Route = void (*)(ServerContext&, const http::Request&, http::Response&);

// See ServerContext::max_prompt_bytes: a token never stands for more input
// bytes than its piece has (SPM's U+2581 and GPT-2's byte mapping only grow
// what they replace), so more than max_model_len longest pieces of bytes
// always tokenize past the context.
size_t max_prompt_bytes(const Engine& engine) {
  const Tokenizer& tok = engine.tokenizer();
  size_t longest = 1;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) longest = std::max(longest, tok.piece(id).size());
  return static_cast<size_t>(engine.max_model_len()) * longest;
}

// The default of --grammar-mem and --body-mem, from the machine's memory.
int64_t default_memory_share() {
  const int64_t physical = static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGESIZE);
  return constrain::default_grammar_memory(physical);
}

constrain::GrammarLimits grammar_limits(const ServerConfig& c) {
  constrain::GrammarLimits l;
  l.memory_bytes = c.grammar_mem_bytes > 0 ? c.grammar_mem_bytes : default_memory_share();
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  l.max_compilations = c.grammar_compilations > 0 ? c.grammar_compilations : std::max(1, cores / 2);
  l.max_wait = c.grammar_wait;
  return l;
}

}  // namespace

void Server::Impl::load_template(const Engine& engine) {
  // An override must parse (a startup error); a model without a template
  // still serves completions, and chat requests get a 400.
  try {
    ctx.chat_template = load_chat_template(engine.model().gguf().metadata(), config.chat_template_file);
    ctx.tool_format = detect_tool_call_format(ctx.chat_template->source());
    ctx.template_renders_tools = template_renders_tools(ctx.chat_template->source());
    ctx.reasoning_markers = detect_reasoning_markers(ctx.chat_template->source());
    log_info("chat template: tool calls in the {} format{}{}", tool_call_format_name(ctx.tool_format),
             ctx.template_renders_tools ? "" : " (tools described in a system prompt)",
             !ctx.reasoning_markers ? ""
             : config.separate_reasoning ? "; thinking answered apart (reasoning_content)"
                                         : "; thinking left in the content (--reasoning-format none)");
  } catch (const Error& e) {
    if (config.chat_template_file) throw;
    ctx.chat_template_error = e.what();
    log_warn("chat completions disabled: {}", e.what());
  }
}

// One slot per sequence the engine runs at once; their files' folder made
// now, so a save never finds it missing.
void Server::Impl::open_slots(const Engine& engine) {
  ctx.slots = std::make_unique<SlotTable>(engine.config().max_seqs);
  ctx.slot_save_path = config.slot_save_path;
  ctx.slot_namespace = config.slot_namespace;
  if (config.slot_save_path.empty()) return;
  if (const int err = make_private_directories(config.slot_save_path); err != 0)
    throw_error(ErrorCode::kInvalidArgument, "--slot-save-path {}: {}", config.slot_save_path, std::strerror(err));
}

void Server::Impl::add_routes() {
  auto route = [this](Route handler, Access access) {
    return with_access(door, access, [this, handler](http::Request& req, http::Response& res) {
      // The body's parsed JSON is held for as long as the handler runs.
      const int64_t body_memory = take_body_memory(ctx, req, res);
      if (body_memory == 0 && !req.body.empty()) return;
      const BodyMemoryHold hold{*ctx.body_memory, body_memory};
      handler(ctx, req, res);
    });
  };
  auto post = [this](const std::string& path, RouteHandler h) { routes.post(path, std::move(h)); };
  auto get = [this](const std::string& path, RouteHandler h) { routes.get(path, std::move(h)); };
  post("/v1/completions", route(handle_completions, Access::kMetered));
  post("/v1/chat/completions", route(handle_chat_completions, Access::kMetered));
  post("/v1/messages", route(handle_messages, Access::kMetered));
  post("/v1/messages/count_tokens", route(handle_count_tokens, Access::kKey));
  post("/v1/completions/render", route(handle_render_completion, Access::kKey));
  post("/v1/chat/completions/render", route(handle_render_chat, Access::kKey));
  post("/v1/responses", route(handle_responses, Access::kMetered));
  get(R"(/v1/responses/([A-Za-z0-9_-]+))", route(handle_get_response, Access::kKey));
  get(R"(/v1/responses/([A-Za-z0-9_-]+)/input_items)", route(handle_response_input_items, Access::kKey));
  routes.del(R"(/v1/responses/([A-Za-z0-9_-]+))", route(handle_delete_response, Access::kKey));
  get("/v1/models", route(handle_models, Access::kKey));
  get(R"(/v1/models/(.+))", route(handle_model, Access::kKey));
  post("/v1/embeddings", route(handle_embeddings, Access::kMetered));
  post("/rerank", route(handle_rerank, Access::kMetered));
  post("/v1/rerank", route(handle_rerank, Access::kMetered));
  post("/v1/score", route(handle_score, Access::kMetered));
  post("/tokenize", route(handle_tokenize, Access::kKey));
  post("/detokenize", route(handle_detokenize, Access::kKey));
  post("/apply-template", route(handle_apply_template, Access::kKey));
  post("/infill", route(handle_infill, Access::kMetered));
  get("/health", route(handle_health, Access::kPublic));
  get("/props", route(handle_props, Access::kKey));
  for (const char* path : {"/server_info", "/get_server_info"}) get(path, route(handle_server_info, Access::kKey));
  for (const char* path : {"/model_info", "/get_model_info"}) get(path, route(handle_model_info, Access::kKey));
  get("/get_load", route(handle_get_load, Access::kKey));
  for (const char* path : {"/flush_cache", "/reset_prefix_cache"}) post(path, route(handle_flush_cache, Access::kKey));
  post("/v1/load_lora_adapter", route(handle_load_lora, Access::kKey));
  post("/v1/unload_lora_adapter", route(handle_unload_lora, Access::kKey));
  get("/metrics", route(handle_metrics, Access::kMetrics));
  get("/v1/status", route(handle_status, Access::kStatus));
  get("/v1/kv/events", route(handle_kv_events, Access::kKey));
  get("/slots", route(handle_slots, Access::kKey));
  post(R"(/slots/([0-9]+))", route(handle_slot_action, Access::kKey));
  add_web_routes(routes);
}

Server::Server(Engine& engine, ServerConfig config) : impl_(std::make_unique<Impl>(engine, std::move(config))) {
  Impl& s = *impl_;
  if (s.ctx.model_names.empty()) throw_error(ErrorCode::kInvalidArgument, "the server needs a model name");
  for (const ServedLora& lora : s.config.loras)
    for (const std::string& name : s.ctx.model_names)
      if (lora.name == name)
        throw_error(ErrorCode::kInvalidArgument, "--lora {}: the base model is served under that name", name);
  s.load_template(engine);
  set_pooling(s.ctx, engine.model().config(), s.config.pooling);
  set_reranker(s.ctx, engine.model());
  if (s.config.model_sampling_defaults) {
    s.ctx.sampling_defaults = SamplingDefaults::from_metadata(engine.model().gguf().metadata());
    if (!s.ctx.sampling_defaults.empty())
      log_info("sampling defaults from the model (--generation-config none: OpenAI's): {}",
               s.ctx.sampling_defaults.describe());
  }
  s.ctx.max_prompt_bytes = max_prompt_bytes(engine);
  s.ctx.kv_chunks_auto = s.config.kv_chunks_auto;
  if (!s.config.responses_redis_url.empty())
    s.ctx.responses.share(open_redis(s.config.responses_redis_url, s.config.responses_redis_password_file, {},
                                     "--kv-redis"),
                          s.config.responses_redis_ttl_s);
  s.ctx.grammars = std::make_unique<constrain::GrammarCache>(grammar_limits(s.config));
  s.ctx.heap_trimmer = &s.heap_trimmer;
  s.ctx.body_memory =
      std::make_unique<MemoryBudget>(s.config.body_mem_bytes > 0 ? s.config.body_mem_bytes : default_memory_share());
  s.ctx.instance_id = openai::new_id("kvlm");
  s.ctx.keys = &s.door.keys;
  s.open_slots(engine);
  s.add_routes();
  s.routes.set_cors_origins(s.config.cors_origins);
  // Anthropic's clients read errors on its routes in Anthropic's shape: the
  // key check's 401, a 404 under /v1/messages, a failure found later too.
  s.routes.set_shaper(anthropic::shape_error);
  http::ServerLimits limits = s.config.http;
  if (limits.handler_threads <= 0) limits.handler_threads = std::max(32, 2 * engine.config().max_seqs + 8);
  limits.retry_after_s = s.config.retry_after_s;
  s.http = make_http_server(limits, s.routes, s.config.ssl_cert_file, s.config.ssl_key_file);
  s.ctx.http_stats = &s.http->stats();
}

Server::~Server() { stop(); }

void Server::bind() { impl_->port = impl_->http->bind(impl_->config.host, impl_->config.port); }

void Server::reload_api_keys() {
  impl_->door.keys.replace(load_api_keys(impl_->config.api_keys, impl_->config.api_key_file));
}

int Server::port() const { return impl_->port; }

void Server::run() {
  if (impl_->port < 0) bind();
  impl_->http->run();
}

size_t Server::drain(std::chrono::milliseconds timeout) { return impl_->ctx.in_flight.drain(impl_->ctx.engine, timeout); }

void Server::stop() { impl_->http->stop(); }

}  // namespace kvlm
