// OpenAI's Responses API (POST /v1/responses) as plain data: a request read
// into the chat request every front end shares (openai/protocol.h parses
// it), and the answer written as a response object or as its SSE events.
// No engine and no store here (routes_responses.cpp keeps the stored ones).
//
//   request                                  | becomes (chat)
//   input: a string                          | a user message
//   input items: messages (input_text,       | messages (developer: system)
//     output_text), function_call,           | assistant tool_calls,
//     function_call_output; reasoning items  | tool messages; dropped
//   item_reference {id}                      | the stored item it names, as above
//   instructions                             | a system message first (not stored)
//   tools[] {type: function, name, ...}      | function tools
//   tool_choice, parallel_tool_calls         | the same
//   text.format json_schema / json_object    | response_format
//   max_output_tokens, temperature, top_p    | max_tokens, the same
// Built-in tools (web_search, file_search, ...), background mode and
// non-text input parts are a 400 naming them.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <variant>

#include "wire/answer_writer.h"
#include "wire/openai/protocol.h"

namespace kvlm::responses {

using Json = openai::Json;

struct Request {
  Json chat;         // the chat request body, without messages
  Json input;        // this request's input as chat messages
  Json input_items;  // this request's input as items with ids (input_items.h), references resolved
  std::optional<std::string> instructions;
  std::optional<std::string> previous_response_id;
  bool store = true;
  Json echo;  // the fields a response object repeats (tools, tool_choice, text, ...)
};
// The stored item an item_reference names (its id), or nullopt when there
// is none this request may read.
using ItemLookup = std::function<std::optional<Json>(const std::string& id)>;
// The request, or the error that refuses it: a 400 naming the field, or a
// 404 naming an item_reference's id that `lookup` does not find.
std::variant<Request, openai::RequestError> read_request(const Json& body, const ItemLookup& lookup);

// A response's usage object (input_tokens_details.cached_tokens: the prompt
// tokens the prefix cache or a KV tier served).
Json usage_json(const AnswerUsage& u);
// An output item's id: "rs_", "msg_", "fc_" and hex.
std::string item_id(const char* prefix);
// The chat messages of an answer, as the next turn's history holds them.
Json assistant_messages(const ChoiceAnswer& a);

// A response and its stream's events. `done` is called with the final
// response object (completed or incomplete) and the answer.
class ResponseWriter : public AnswerWriter {
 public:
  using Done = std::function<void(const Json& response, const ChoiceAnswer& a)>;
  ResponseWriter(std::string id, std::string model, int64_t created, Json echo, Done done);

  Json whole(const ChoiceAnswer& a, const AnswerEnd& end, const AnswerUsage& usage) override;
  std::string stream_start(const AnswerUsage& usage) override;
  std::string stream_piece(const ChoiceDelta& piece, const ChoiceAnswer& so_far) override;
  std::string stream_end(const ChoiceAnswer& a, const AnswerEnd& end, const AnswerUsage& usage) override;
  std::string stream_error(const openai::RequestError& e) override;

 private:
  enum class Item { kNone, kReasoning, kMessage, kFunctionCall };
  Json response(const char* status, Json output, const Json& usage) const;
  // The output items of an answer; `cut`: max_output_tokens ended it.
  Json output_of(const ChoiceAnswer& a, bool cut);
  std::string event(const char* type, Json data);
  std::string open(Item kind, Json item);
  // Closes the open item with `status` (a message's or a call's:
  // "completed", or "incomplete" for the one the token limit cut).
  std::string close(const char* status = "completed");

  std::string id_, model_;
  int64_t created_;
  Json echo_;
  Done done_;
  // Streaming: the open item and its text so far, the items closed (the
  // final response's output), the events' sequence_number.
  Item open_ = Item::kNone;
  Json open_item_;
  std::string open_text_;
  Json items_ = Json::array();
  int64_t sequence_ = 0;
};

}  // namespace kvlm::responses
