// POST /v1/messages (Anthropic's Messages API): the request read into a chat
// request (anthropic/messages.h), made a Generation as chat completions make
// theirs, and answered by a MessageWriter (routes_front.cpp).
#include "server/routes.h"
#include "server/routes_choices.h"
#include "wire/anthropic/messages.h"

namespace kvlm {

void handle_messages(ServerContext& ctx, const http::Request& req, http::Response& res) {
  auto body = parse_body(req, res);
  if (!body) return;
  auto chat = anthropic::chat_body(*body);
  if (auto* e = std::get_if<openai::RequestError>(&chat)) return send_error(res, *e);
  std::optional<openai::ChatRequest> parsed = parse_chat(ctx, std::get<openai::Json>(chat), res);
  if (!parsed) return;
  // Anthropic's ids: "msg_" and hex.
  std::string id = openai::new_id("msg");
  id[3] = '_';
  std::optional<Generation> gen = chat_generation(ctx, std::move(*parsed), id, res);
  if (!gen) return;
  gen->writer = std::make_shared<anthropic::MessageWriter>(gen->id, gen->model);
  run_generation(ctx, std::move(*gen), req, res);
}

}  // namespace kvlm
