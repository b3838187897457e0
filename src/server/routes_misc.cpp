// Small routes: models, health, tokenize/detokenize, and the shared helpers.
#include <ctime>

#include <fmt/format.h>

#include "common/error.h"
#include "engine/engine.h"
#include "server/metrics_text.h"
#include "server/routes.h"
#include "tokenizer/tokenizer.h"

namespace kvlm {

using openai::Json;

void send_error(httplib::Response& res, const openai::RequestError& e) {
  res.status = e.status;
  res.set_content(openai::error_json(e).dump(), "application/json");
}

std::optional<Json> parse_body(const httplib::Request& req, httplib::Response& res) {
  try {
    return Json::parse(req.body);
  } catch (const nlohmann::json::parse_error& e) {
    send_error(res, {400, fmt::format("the request body is not valid JSON: {}", e.what()), std::nullopt});
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
  res.set_content(Json{{"object", "list"}, {"data", Json::array({model})}}.dump(), "application/json");
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
  res.set_content(prometheus_text(ctx.engine.metrics(), ctx.model_name), "text/plain; version=0.0.4");
}

// {"content": "text", "add_special": true, "parse_special": true} -> {"tokens": [...]}
void handle_tokenize(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  auto body = parse_body(req, res);
  if (!body) return;
  if (!body->is_object() || !body->contains("content") || !(*body)["content"].is_string())
    return send_error(res, {400, "'content' must be a string", std::string("content")});
  const bool add_special = body->value("add_special", true);
  const bool parse_special = body->value("parse_special", true);
  const Tokenizer& tok = ctx.engine.tokenizer();
  const std::vector<int32_t> ids = tok.encode((*body)["content"].get<std::string>(), add_special, parse_special);
  Json out = {{"tokens", ids}, {"count", ids.size()}};
  if (body->value("with_pieces", false)) {
    Json pieces = Json::array();
    for (int32_t id : ids) pieces.push_back(tok.piece(id));
    out["pieces"] = pieces;
  }
  res.set_content(out.dump(), "application/json");
}

// {"tokens": [...]} -> {"content": "text"}
void handle_detokenize(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  auto body = parse_body(req, res);
  if (!body) return;
  if (!body->is_object() || !body->contains("tokens") || !(*body)["tokens"].is_array())
    return send_error(res, {400, "'tokens' must be an array of token ids", std::string("tokens")});
  const Tokenizer& tok = ctx.engine.tokenizer();
  std::vector<int32_t> ids;
  for (const Json& t : (*body)["tokens"]) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tok.vocab_size())
      return send_error(res, {400, fmt::format("token ids must be integers in [0, {})", tok.vocab_size()),
                              std::string("tokens")});
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  res.set_content(Json{{"content", tok.decode(ids)}}.dump(), "application/json");
}

}  // namespace kvlm
