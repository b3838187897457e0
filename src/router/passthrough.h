// Requests the router forwards without rebuilding their answers: the APIs
// whose streams are not chat-completion chunks (Anthropic Messages, OpenAI
// Responses) and those with no stream (embeddings). Internal to router/.
#pragma once

#include "wire/http/message.h"

#include "router/context.h"

namespace kvlm::router {

// Forwards `req` to a worker the configured policy chooses, from
// the options' prompt view (from which the prompt reader reads its tokens),
// or to the worker that stored the Response named, retrying on
// another worker until the answer starts. A stream (text/event-stream) is
// copied through as it comes; a worker that dies during one ends it (these
// streams are not resumed, unlike /v1/completions and /v1/chat/completions).
struct PassthroughOptions {
  const Json* prompt_view = nullptr;  // the request as a chat completion's body; null: only load decides
  std::string owner_of{};             // a stored Response's id: its worker first (ResponseOwners)
  bool records_responses = false;     // remember the worker of the Response this answer creates
};
void handle_passthrough(RouterContext& ctx, const http::Request& req, http::Response& res,
                        const PassthroughOptions& options);

// The routes: POST /v1/messages (its prompt read as a chat's), POST
// /v1/responses (to the worker of its previous_response_id, else of its
// first item_reference), GET and DELETE /v1/responses/{id} and GET
// /v1/responses/{id}/input_items (to the Response's worker). A Response or
// item the router knows under another of its keys is a 404 here.
void handle_messages_passthrough(RouterContext& ctx, const http::Request& req, http::Response& res);
// POST /infill (llama.cpp's fill-in-the-middle): routed by load, its
// stream copied through.
void handle_infill_passthrough(RouterContext& ctx, const http::Request& req, http::Response& res);
void handle_responses_passthrough(RouterContext& ctx, const http::Request& req, http::Response& res);
void handle_stored_response(RouterContext& ctx, const http::Request& req, http::Response& res);

}  // namespace kvlm::router
