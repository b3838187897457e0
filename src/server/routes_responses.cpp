// POST /v1/responses (OpenAI's Responses API), GET and DELETE
// /v1/responses/{id}: the request read into a chat request
// (responses/responses.h), its conversation continued from a stored
// response (previous_response_id), made a Generation as chat completions
// make theirs and answered by a ResponseWriter (routes_front.cpp), which
// stores the response when asked (store, the default).
#include <fmt/format.h>

#include "server/openai/json_text.h"
#include "server/responses/responses.h"
#include "server/routes.h"
#include "server/routes_choices.h"

namespace kvlm {

using openai::Json;

namespace {

void send_not_found(http::Response& res, const std::string& id, const char* param) {
  openai::RequestError e{404, fmt::format("Response with id '{}' not found.", id), std::string(param)};
  e.code = "not_found";
  send_error(res, e);
}

}  // namespace

void handle_responses(ServerContext& ctx, const http::Request& req, http::Response& res) {
  auto body = parse_body(req, res);
  if (!body) return;
  auto read = responses::read_request(*body);
  if (auto* e = std::get_if<openai::RequestError>(&read)) return send_error(res, *e);
  responses::Request& r = std::get<responses::Request>(read);
  // The stored conversation, then this request's input.
  Json conversation = Json::array();
  if (r.previous_response_id) {
    std::optional<ResponseStore::Stored> previous = ctx.responses.get(*r.previous_response_id);
    if (!previous) return send_not_found(res, *r.previous_response_id, "previous_response_id");
    conversation = std::move(previous->messages);
  }
  for (const Json& m : r.input) conversation.push_back(m);
  Json chat = r.chat;
  chat["messages"] = Json::array();
  if (r.instructions) chat["messages"].push_back({{"role", "system"}, {"content", *r.instructions}});
  for (const Json& m : conversation) chat["messages"].push_back(m);
  std::optional<openai::ChatRequest> parsed = parse_chat(ctx, chat, res);
  if (!parsed) return;
  const std::string id = responses::item_id("resp");
  std::optional<Generation> gen = chat_generation(ctx, std::move(*parsed), id, res);
  if (!gen) return;
  responses::ResponseWriter::Done done;
  if (r.store) {
    done = [&store = ctx.responses, id, conversation](const Json& response, const ChoiceAnswer& a) {
      Json messages = conversation;
      for (const Json& m : responses::assistant_messages(a)) messages.push_back(m);
      store.put(id, {response, std::move(messages)});
    };
  }
  gen->writer = std::make_shared<responses::ResponseWriter>(gen->id, gen->model, gen->created, r.echo, std::move(done));
  run_generation(ctx, std::move(*gen), req, res);
}

void handle_get_response(ServerContext& ctx, const http::Request& req, http::Response& res) {
  const std::string id = req.matches[1];
  const std::optional<ResponseStore::Stored> stored = ctx.responses.get(id);
  if (!stored) return send_not_found(res, id, "response_id");
  res.set_content(openai::dump_json(stored->response), "application/json");
}

void handle_delete_response(ServerContext& ctx, const http::Request& req, http::Response& res) {
  const std::string id = req.matches[1];
  if (!ctx.responses.erase(id)) return send_not_found(res, id, "response_id");
  res.set_content(openai::dump_json({{"id", id}, {"object", "response"}, {"deleted", true}}), "application/json");
}

}  // namespace kvlm
