// Anthropic's shapes outside the Messages body: its model list (GET
// /v1/models and /v1/models/{id} asked by an Anthropic client, which always
// sends `anthropic-version`) and its errors on its own routes. Plain data;
// routes_misc.cpp and the route tables of kvlm serve and kvlm router use
// them.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "wire/http/message.h"
#include "wire/openai/protocol.h"

namespace kvlm::anthropic {

using Json = openai::Json;

// Whether `req` came from an Anthropic client: it carries anthropic-version.
bool asks_anthropic(const http::Request& req);

// A model as Anthropic lists it: {type: "model", id, display_name,
// created_at (RFC 3339)}; `created` in seconds since the epoch.
Json model_json(const std::string& id, int64_t created);

// One page of the models `ids` (in order) for a list request's parameters
// after_id, before_id and limit (1..1000, default 20): {data, first_id,
// last_id, has_more}, or the 400 naming a wrong parameter.
std::variant<Json, openai::RequestError> model_page(const std::vector<std::string>& ids, int64_t created,
                                                    const http::Request& req);

// The transport's decorator for Anthropic's routes (every path under
// /v1/messages, and /v1/models* asked by an Anthropic client): an error
// answer, whoever made it (a handler, the route table's 404 or 405, the key
// check, a refusal of the transport), is rewritten into Anthropic's shape,
// and an overload (503) becomes Anthropic's 529 overloaded_error.
void shape_error(const http::Request& req, http::Response& res);

}  // namespace kvlm::anthropic
