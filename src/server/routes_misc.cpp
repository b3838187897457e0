// Small routes: models, health, tokenize/detokenize, and the shared helpers.
#include <algorithm>
#include <ctime>

#include <fmt/format.h>

#include "chat/chat_template.h"
#include "common/error.h"
#include "common/heap_trimmer.h"
#include "common/log.h"
#include "common/memory_budget.h"
#include "constrain/grammar_cache.h"
#include "engine/engine.h"
#include "server/metrics_text.h"
#include "server/routes.h"
#include "server/sampling_defaults.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "wire/anthropic/models.h"
#include "wire/openai/fields.h"
#include "wire/openai/json_text.h"

namespace kvlm {

using openai::Json;

namespace {

// The model object of one served name (each alias is listed as its own
// model, as OpenAI lists every model a key may use).
// When the models were "created": the server's start.
int64_t models_created() {
  static const int64_t created = static_cast<int64_t>(std::time(nullptr));
  return created;
}

Json model_json(const ServerContext& ctx, const std::string& name) {
  return Json{{"id", name},
              {"object", "model"},
              {"created", models_created()},
              {"owned_by", "kvlm"},
              {"max_model_len", ctx.engine.max_model_len()}};
}

}  // namespace

// An Anthropic client (anthropic-version) gets Anthropic's list.
void handle_models(ServerContext& ctx, const http::Request& req, http::Response& res) {
  if (anthropic::asks_anthropic(req)) {
    auto page = anthropic::model_page(ctx.model_names, models_created(), req);
    if (auto* e = std::get_if<openai::RequestError>(&page)) return send_error(res, *e);
    return res.set_content(openai::dump_json(std::get<Json>(page)), "application/json");
  }
  Json data = Json::array();
  for (const std::string& name : ctx.model_names) data.push_back(model_json(ctx, name));
  for (const LoraInfo& lora : ctx.loras->list()) data.push_back(lora_model_json(ctx, lora));
  res.set_content(openai::dump_json(Json{{"object", "list"}, {"data", std::move(data)}}), "application/json");
}

void handle_model(ServerContext& ctx, const http::Request& req, http::Response& res) {
  // The route's pattern captures the rest of the path: ids may hold '/' ("org/model").
  const std::string id = req.matches.size() > 1 ? req.matches[1] : "";
  for (const std::string& name : ctx.model_names) {
    if (name != id) continue;
    const Json model = anthropic::asks_anthropic(req) ? anthropic::model_json(name, models_created())
                                                      : model_json(ctx, name);
    return res.set_content(openai::dump_json(model), "application/json");
  }
  for (const LoraInfo& lora : ctx.loras->list())
    if (lora.name == id) return res.set_content(openai::dump_json(lora_model_json(ctx, lora)), "application/json");
  send_model_not_found(res, id);
}

// llama.cpp's GET /props: what a client reads to set itself up (the model's
// name, context, slots, default sampling, chat template and special tokens).
void handle_props(ServerContext& ctx, const http::Request&, http::Response& res) {
  const Tokenizer& tok = ctx.engine.tokenizer();
  const SamplingDefaults& d = ctx.sampling_defaults;
  // A request's sampling when it sets nothing: the model's defaults over OpenAI's.
  Json params = {{"temperature", d.temperature.value_or(1.f)}, {"top_p", d.top_p.value_or(1.f)},
                 {"top_k", d.top_k.value_or(0)}, {"min_p", d.min_p.value_or(0.f)},
                 {"repeat_penalty", d.repetition_penalty.value_or(1.f)}};
  Json props = {
      {"model_alias", ctx.model_names[0]},
      {"total_slots", ctx.engine.config().max_seqs},
      {"default_generation_settings", {{"n_ctx", ctx.engine.max_model_len()}, {"params", std::move(params)}}},
      {"chat_template", ctx.chat_template ? ctx.chat_template->source() : ""},
      {"bos_token", tok.bos_id() ? tok.piece(*tok.bos_id()) : ""},
      {"eos_token", tok.eos_id() ? tok.piece(*tok.eos_id()) : ""},
      {"modalities", {{"vision", false}, {"audio", false}}},
      {"build_info", "kvlm"},
  };
  res.set_content(openai::dump_json(props), "application/json");
}

// 503 while draining, so load balancers stop sending before the port closes.
void handle_health(ServerContext& ctx, const http::Request&, http::Response& res) {
  if (ctx.in_flight.draining()) {
    res.status = 503;
    res.set_content(R"({"status":"draining"})", "application/json");
    return;
  }
  res.set_content(R"({"status":"ok"})", "application/json");
}

void handle_metrics(ServerContext& ctx, const http::Request&, http::Response& res) {
  const constrain::GrammarStats grammars = ctx.grammars->stats();
  const int64_t num_rejected_connections =
      ctx.http_stats ? ctx.http_stats->refused_of(http::Refusal::kTooManyConnections) +
                           ctx.http_stats->refused_of(http::Refusal::kTooManyFromClient)
                     : 0;
  ServerSeries series{.rejected = {num_rejected_connections, ctx.num_rejected_queue.load(),
                                   ctx.num_rejected_body_memory.load()},
                      .grammars = &grammars,
                      .num_heap_trims = ctx.heap_trimmer->num_trims(),
                      .body_memory_bytes = ctx.body_memory->num_bytes_in_use(),
                      .body_memory_budget_bytes = ctx.body_memory->limit()};
  const std::string& name = ctx.model_names[0];
  const EngineMetrics metrics = ctx.engine.metrics();
  std::string compat;
  for (MetricsCompat c : ctx.metrics_compat) compat += compat_metrics_text(metrics, name, c);
  const LoraSeries loras{.max_loras = ctx.loras->max_loras(), .num_loaded = ctx.loras->list().size(),
                         .running = ctx.loras->names_in_use(), .usage = ctx.loras->usage()};
  const bool vllm = std::find(ctx.metrics_compat.begin(), ctx.metrics_compat.end(), MetricsCompat::kVllm) !=
                    ctx.metrics_compat.end();
  compat += lora_metrics_text(loras, name, vllm);
  res.set_content(prometheus_text(metrics, name) + compat + server_metrics_text(series, name) +
                      (ctx.keys ? ctx.keys->metrics_text() : std::string()) +
                      (ctx.http_stats ? http::stats_metrics_text(*ctx.http_stats) : std::string()),
                  "text/plain; version=0.0.4");
}

// {"content": "text", "add_special": true, "parse_special": true, "with_pieces": false}
//   -> {"tokens": [...], "count": N, "pieces": [...]}
void handle_tokenize(ServerContext& ctx, const http::Request& req, http::Response& res) {
  auto body = parse_body(req, res);
  if (!body) return;
  if (body->is_object() && body->contains("messages")) return handle_tokenize_messages(ctx, *body, res);
  auto parsed = openai::parse_tokenize_request(*body);
  if (auto* e = std::get_if<openai::RequestError>(&parsed)) return send_error(res, *e);
  const openai::TokenizeRequest& o = std::get<openai::TokenizeRequest>(parsed);
  if (o.content.size() > ctx.max_prompt_bytes)
    return send_error(res, {400, fmt::format("'content' has {} bytes; at most {} are tokenized", o.content.size(),
                                             ctx.max_prompt_bytes), std::string("content")});
  const Tokenizer& tok = ctx.engine.tokenizer();
  const std::vector<int32_t> ids = tok.encode(o.content, o.add_special, o.parse_special);
  Json out = {{"tokens", ids}, {"count", ids.size()}};
  if (o.with_pieces) {
    // A piece may be part of a UTF-8 character: dump_json replaces what is broken.
    Json pieces = Json::array();
    for (int32_t id : ids) pieces.push_back(tok.piece(id));
    out["pieces"] = pieces;
  }
  res.set_content(openai::dump_json(out), "application/json");
}

// {"tokens": [...]} -> {"content": "text"}
void handle_detokenize(ServerContext& ctx, const http::Request& req, http::Response& res) {
  auto body = parse_body(req, res);
  if (!body) return;
  const Tokenizer& tok = ctx.engine.tokenizer();
  auto parsed = openai::parse_detokenize_request(*body, tok.vocab_size());
  if (auto* e = std::get_if<openai::RequestError>(&parsed)) return send_error(res, *e);
  // Byte tokens may decode to broken UTF-8: dump_json replaces it with U+FFFD.
  res.set_content(openai::dump_json(Json{{"content", tok.decode(std::get<std::vector<int32_t>>(parsed))}}),
                  "application/json");
}

}  // namespace kvlm
