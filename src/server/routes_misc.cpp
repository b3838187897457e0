// Small routes: models, health, tokenize/detokenize, and the shared helpers.
#include <ctime>

#include <fmt/format.h>

#include "common/error.h"
#include "common/log.h"
#include "engine/engine.h"
#include "server/metrics_text.h"
#include "server/openai/fields.h"
#include "server/openai/json_text.h"
#include "server/routes.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace kvlm {

using openai::Json;

void send_error(httplib::Response& res, const openai::RequestError& e) {
  res.status = e.status;
  res.set_content(openai::dump_json(openai::error_json(e)), "application/json");
}

openai::RequestError error_for(const Error& e) {
  int status = 500;
  switch (e.code()) {
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kOutOfRange:
    case ErrorCode::kUnsupported: status = 400; break;
    case ErrorCode::kNotFound: status = 404; break;
    case ErrorCode::kUnavailable: status = 503; break;
    default: break;
  }
  openai::RequestError r{status, e.what(), std::nullopt};
  if (status >= 500) r.type = "server_error";
  return r;
}

void send_internal_error(httplib::Response& res, const httplib::Request& req, std::string_view what) {
  const std::string id = openai::new_id("err");
  log_error("{} {} {}: internal error: {}", id, unicode::sanitize_utf8(req.method), unicode::sanitize_utf8(req.path),
            unicode::sanitize_utf8(what));
  send_error(res, {500, fmt::format("internal error (logged as {})", id), std::nullopt, "server_error"});
}

std::optional<Json> parse_body(const httplib::Request& req, httplib::Response& res) {
  try {
    return openai::parse_json(req.body);
  } catch (const Error& e) {
    send_error(res, {400, fmt::format("the request body is {}", e.what()), std::nullopt});
    return std::nullopt;
  }
}

void handle_models(ServerContext& ctx, const httplib::Request&, httplib::Response& res) {
  static const int64_t created = static_cast<int64_t>(std::time(nullptr));
  Json model = {{"id", ctx.model_name},
                {"object", "model"},
                {"created", created},
                {"owned_by", "kvlm"},
                {"max_model_len", ctx.engine.max_model_len()}};
  res.set_content(openai::dump_json(Json{{"object", "list"}, {"data", Json::array({model})}}), "application/json");
}

// 503 while draining, so load balancers stop sending before the port closes.
void handle_health(ServerContext& ctx, const httplib::Request&, httplib::Response& res) {
  if (ctx.in_flight.draining()) {
    res.status = 503;
    res.set_content(R"({"status":"draining"})", "application/json");
    return;
  }
  res.set_content(R"({"status":"ok"})", "application/json");
}

void handle_metrics(ServerContext& ctx, const httplib::Request&, httplib::Response& res) {
  const RejectionCounts rejected{ctx.num_rejected_connections.load(), ctx.num_rejected_queue.load()};
  res.set_content(prometheus_text(ctx.engine.metrics(), ctx.model_name) + server_metrics_text(rejected, ctx.model_name),
                  "text/plain; version=0.0.4");
}

// {"content": "text", "add_special": true, "parse_special": true, "with_pieces": false}
//   -> {"tokens": [...], "count": N, "pieces": [...]}
void handle_tokenize(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  auto body = parse_body(req, res);
  if (!body) return;
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
void handle_detokenize(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
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
