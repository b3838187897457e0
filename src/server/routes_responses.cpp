// POST /v1/responses (OpenAI's Responses API), GET and DELETE
// /v1/responses/{id}, GET /v1/responses/{id}/input_items: the request read
// into a chat request (responses/responses.h), its item references resolved
// and its conversation continued from stored responses
// (previous_response_id), made a Generation as chat completions make theirs
// and answered by a ResponseWriter (routes_front.cpp), which stores the
// response when asked (store, the default) under the request's API key: a
// key reads, continues and deletes only what was stored under it (or
// without keys).
#include <fmt/format.h>

#include "server/routes.h"
#include "server/routes_choices.h"
#include "wire/openai/json_text.h"
#include "wire/responses/input_items.h"
#include "wire/responses/responses.h"

namespace kvlm {

using openai::Json;

namespace {

void send_not_found(http::Response& res, const std::string& id, const char* param) {
  openai::RequestError e{404, fmt::format("Response with id '{}' not found.", id), std::string(param)};
  e.code = "not_found";
  send_error(res, e);
}

// The stored response `id` when the request's key may read it.
std::optional<ResponseStore::Stored> readable_response(const ServerContext& ctx, const http::Request& req,
                                                       const std::string& id) {
  std::optional<ResponseStore::Stored> s = ctx.responses.get(id);
  if (!s || !ResponseStore::readable(s->owner, req.key_name)) return std::nullopt;
  return s;
}

}  // namespace

void handle_responses(ServerContext& ctx, const http::Request& req, http::Response& res) {
  auto body = parse_body(req, res);
  if (!body) return;
  const auto lookup = [&](const std::string& item_id) -> std::optional<Json> {
    std::optional<ResponseStore::FoundItem> found = ctx.responses.find_item(item_id);
    if (!found || !ResponseStore::readable(found->owner, req.key_name)) return std::nullopt;
    return std::move(found->item);
  };
  auto read = responses::read_request(*body, lookup);
  if (auto* e = std::get_if<openai::RequestError>(&read)) return send_error(res, *e);
  responses::Request& r = std::get<responses::Request>(read);
  // The stored conversation, then this request's input.
  Json conversation = Json::array();
  if (r.previous_response_id) {
    std::optional<ResponseStore::Stored> previous = readable_response(ctx, req, *r.previous_response_id);
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
    done = [&store = ctx.responses, id, conversation, items = std::move(r.input_items),
            owner = req.key_name](const Json& response, const ChoiceAnswer& a) {
      Json messages = conversation;
      for (const Json& m : responses::assistant_messages(a)) messages.push_back(m);
      store.put(id, {response, std::move(messages), items, owner});
    };
  }
  gen->writer = std::make_shared<responses::ResponseWriter>(gen->id, gen->model, gen->created, r.echo, std::move(done));
  run_generation(ctx, std::move(*gen), req, res);
}

void handle_get_response(ServerContext& ctx, const http::Request& req, http::Response& res) {
  const std::string id = req.matches[1];
  const std::optional<ResponseStore::Stored> stored = readable_response(ctx, req, id);
  if (!stored) return send_not_found(res, id, "response_id");
  res.set_content(openai::dump_json(stored->response), "application/json");
}

void handle_response_input_items(ServerContext& ctx, const http::Request& req, http::Response& res) {
  const std::string id = req.matches[1];
  const std::optional<ResponseStore::Stored> stored = readable_response(ctx, req, id);
  if (!stored) return send_not_found(res, id, "response_id");
  auto query = responses::read_input_items_query(req.get_param_value("limit"), req.get_param_value("order"),
                                                 req.get_param_value("after"));
  if (auto* e = std::get_if<openai::RequestError>(&query)) return send_error(res, *e);
  auto page = responses::input_items_page(stored->input_items, std::get<responses::InputItemsQuery>(query));
  if (auto* e = std::get_if<openai::RequestError>(&page)) return send_error(res, *e);
  res.set_content(openai::dump_json(std::get<Json>(page)), "application/json");
}

void handle_delete_response(ServerContext& ctx, const http::Request& req, http::Response& res) {
  const std::string id = req.matches[1];
  // Another key's response is not there for this one: it stays.
  if (!readable_response(ctx, req, id) || !ctx.responses.erase(id)) return send_not_found(res, id, "response_id");
  res.set_content(openai::dump_json({{"id", id}, {"object", "response"}, {"deleted", true}}), "application/json");
}

}  // namespace kvlm
