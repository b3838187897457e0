// A chat request's prompt without generating: POST /v1/messages/count_tokens
// (Anthropic's: {"input_tokens": N}), POST /apply-template (llama.cpp's:
// {"prompt": text}), the `messages` form of POST /tokenize (vLLM's) and
// vLLM's render routes, which llm-d's precise prefix-cache scorer calls for
// a request's token ids (POST /v1/chat/completions/render,
// /v1/completions/render). Each renders exactly as generation would (the
// same template, tools, BOS), so a client budgeting its context counts what
// it will be charged, and a router hashes the blocks the worker will hold.
#include <fmt/format.h>

#include "common/error.h"
#include "engine/engine.h"
#include "server/routes.h"
#include "server/routes_choices.h"
#include "tokenizer/tokenizer.h"
#include "wire/anthropic/messages.h"
#include "wire/openai/chat_render.h"
#include "wire/openai/json_text.h"
#include "wire/openai/kv_chunks.h"

namespace kvlm {

using openai::Json;

namespace {

// The chat request of `body` (its prompt fields only), checked as a
// generation's would be: the model served, a template to render with, and a
// size the context can hold. Answers the refusal and returns nullopt.
std::optional<openai::ChatRequest> prompt_request(const ServerContext& ctx, const Json& body, http::Response& res) {
  auto parsed = openai::parse_chat_prompt(body);
  if (auto* e = std::get_if<openai::RequestError>(&parsed)) {
    send_error(res, *e);
    return std::nullopt;
  }
  const Json* model = body.is_object() && body.contains("model") && body["model"].is_string() ? &body["model"] : nullptr;
  if (!served_model(ctx, model ? model->get<std::string>() : "", res)) return std::nullopt;
  if (!ctx.chat_template) {
    send_error(res, {400, ctx.chat_template_error, std::string("messages")});
    return std::nullopt;
  }
  auto& r = std::get<openai::ChatRequest>(parsed);
  const size_t num_bytes = r.messages.dump().size();
  if (num_bytes > ctx.max_prompt_bytes) {
    send_error(res, {400, fmt::format("'messages' has {} bytes; at most {} are rendered", num_bytes, ctx.max_prompt_bytes),
                     std::string("messages")});
    return std::nullopt;
  }
  return std::move(r);
}

// Renders with `render`; a template that refuses the messages is a 400 in
// its own words, as generation answers it.
template <typename Render>
bool rendered(http::Response& res, Render&& render) {
  try {
    render();
    return true;
  } catch (const Error& e) {
    send_error(res, {400, e.what(), std::string("messages")});
    return false;
  }
}

// The prompt ids of `body`'s chat request, as generation renders them;
// nullopt after answering the refusal.
std::optional<std::vector<int32_t>> prompt_ids(const ServerContext& ctx, const Json& body, http::Response& res) {
  std::optional<openai::ChatRequest> r = prompt_request(ctx, body, res);
  if (!r) return std::nullopt;
  add_auto_kv_chunks(ctx, *r);
  std::vector<int32_t> ids;
  if (!rendered(res, [&] { ids = render_chat_prompt(ctx.engine.tokenizer(), *ctx.chat_template, *r); })) return std::nullopt;
  return ids;
}

}  // namespace

void handle_count_tokens(ServerContext& ctx, const http::Request& req, http::Response& res) {
  auto body = parse_body(req, res);
  if (!body) return;
  auto chat = anthropic::count_tokens_chat_body(*body);
  if (auto* e = std::get_if<openai::RequestError>(&chat)) return send_error(res, *e);
  std::optional<std::vector<int32_t>> ids = prompt_ids(ctx, std::get<Json>(chat), res);
  if (!ids) return;
  res.set_content(openai::dump_json(Json{{"input_tokens", ids->size()}}), "application/json");
}

void handle_apply_template(ServerContext& ctx, const http::Request& req, http::Response& res) {
  auto body = parse_body(req, res);
  if (!body) return;
  std::optional<openai::ChatRequest> r = prompt_request(ctx, *body, res);
  if (!r) return;
  std::string text;
  if (!rendered(res, [&] { text = render_chat_prompt_text(ctx.engine.tokenizer(), *ctx.chat_template, *r); })) return;
  res.set_content(openai::dump_json(Json{{"prompt", text}}), "application/json");
}

void handle_tokenize_messages(ServerContext& ctx, const Json& body, http::Response& res) {
  std::optional<std::vector<int32_t>> ids = prompt_ids(ctx, body, res);
  if (!ids) return;
  Json out = {{"tokens", *ids}, {"count", ids->size()}, {"max_model_len", ctx.engine.max_model_len()}};
  res.set_content(openai::dump_json(out), "application/json");
}

void handle_render_chat(ServerContext& ctx, const http::Request& req, http::Response& res) {
  auto body = parse_body(req, res);
  if (!body) return;
  std::optional<std::vector<int32_t>> ids = prompt_ids(ctx, *body, res);
  if (!ids) return;
  res.set_content(openai::dump_json(Json{{"token_ids", *ids}}), "application/json");
}

// A completions request's prompts as generation tokenizes them (text with
// BOS and special pieces; ids as given): one {"token_ids"} per prompt.
void handle_render_completion(ServerContext& ctx, const http::Request& req, http::Response& res) {
  auto body = parse_body(req, res);
  if (!body) return;
  auto parsed = openai::parse_completion_request(*body);
  if (auto* e = std::get_if<openai::RequestError>(&parsed)) return send_error(res, *e);
  const auto& r = std::get<openai::CompletionRequest>(parsed);
  if (!served_model(ctx, r.options.model, res)) return;
  Json out = Json::array();
  for (size_t i = 0; i < r.prompts.size(); ++i) {
    if (const auto* text = std::get_if<std::string>(&r.prompts[i]); text && text->size() > ctx.max_prompt_bytes)
      return send_error(res, {400, fmt::format("prompt {} has {} bytes; at most {} are rendered", i, text->size(),
                                               ctx.max_prompt_bytes), std::string("prompt")});
    // kv_chunks mark the one prompt (the parser refuses them with a list).
    out.push_back(Json{{"token_ids", openai::completion_prompt_pieces(ctx.engine.tokenizer(), r.prompts[i], r.kv_chunks).ids}});
  }
  res.set_content(openai::dump_json(out), "application/json");
}

}  // namespace kvlm
