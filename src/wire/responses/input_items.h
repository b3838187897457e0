// A Responses request's input items as a stored response keeps them and
// GET /v1/responses/{id}/input_items lists them: each typed, with an id and
// a status, a message's text as content parts; and the list's pages
// (OpenAI's cursor list: data, first_id, last_id, has_more; after, limit,
// order). Plain data, no store here (routes_responses.cpp).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <variant>

#include "wire/openai/protocol.h"

namespace kvlm::responses {

using Json = openai::Json;

// An input item as listed. `item` is one the request gave (an easy message
// `{role, content}`, a message, function_call, function_call_output or
// reasoning item): it gets a new id of its kind ("msg_", "fc_", "fco_",
// "rs_"), whatever id it came with, since ids the server did not make could
// name another response's items. An item an item_reference named is listed
// as it is stored, under its own id.
Json listed_item(const Json& item);

struct InputItemsQuery {
  size_t limit = 20;                 // 1..100
  bool ascending = false;            // order: OpenAI's default is desc
  std::optional<std::string> after;  // the id the page starts after
};
// The query of GET .../input_items from its parameters' values ("" when
// absent), or the 400 naming the one that is wrong.
std::variant<InputItemsQuery, openai::RequestError> read_input_items_query(const std::string& limit,
                                                                           const std::string& order,
                                                                           const std::string& after);

// One page of `items` (in the order they were given) for `q`: the list
// object, or a 400 when `after` names no item of them.
std::variant<Json, openai::RequestError> input_items_page(const Json& items, const InputItemsQuery& q);

}  // namespace kvlm::responses
