// Anthropic's Messages API (POST /v1/messages) as plain data: its request
// read into the OpenAI chat request every front end shares (openai/
// protocol.h parses it, so limits, grammars and tools behave as in chat),
// and the answer written as a message or as its SSE events. No engine here.
//
//   request                         | becomes (chat)
//   system (text or text blocks)    | a system message
//   text blocks                     | content
//   tool_use blocks (assistant)     | tool_calls, input as arguments' JSON
//   tool_result blocks (user)       | tool messages, before the user's text
//   thinking blocks                 | dropped (a past turn's thinking)
//   tools[].input_schema            | tools[].function.parameters
//   tool_choice auto/any/tool/none  | auto/required/named/none
//   disable_parallel_tool_use       | parallel_tool_calls false
//   stop_sequences, max_tokens      | stop, max_tokens (required)
//   thinking enabled budget_tokens  | thinking_budget (disabled: 0)
// Images, documents and server tools (web search, code execution...) are a
// 400 naming them.
#pragma once

#include <string>
#include <variant>

#include "wire/answer_writer.h"
#include "wire/openai/protocol.h"

namespace kvlm::anthropic {

using Json = openai::Json;

// The chat request body of a Messages request, or the 400 that refuses it.
std::variant<Json, openai::RequestError> chat_body(const Json& body);
// The same for /v1/messages/count_tokens, whose requests carry no max_tokens.
std::variant<Json, openai::RequestError> count_tokens_chat_body(const Json& body);

// An error as Anthropic answers it: {"type": "error", "error": {"type", "message"}}.
Json error_body(const openai::RequestError& e);
// Rewrites an OpenAI error body (a failed route's) into Anthropic's; other
// bodies are left as they are.
void rewrite_error(int status, std::string& body);

// The message (and its stream's events) of one answer. `id`: "msg_...".
class MessageWriter : public AnswerWriter {
 public:
  MessageWriter(std::string id, std::string model) : id_(std::move(id)), model_(std::move(model)) {}

  Json whole(const ChoiceAnswer& a, const AnswerEnd& end, const AnswerUsage& usage) override;
  std::string stream_start(const AnswerUsage& usage) override;
  std::string stream_piece(const ChoiceDelta& piece, const ChoiceAnswer& so_far) override;
  std::string stream_end(const ChoiceAnswer& a, const AnswerEnd& end, const AnswerUsage& usage) override;
  std::string stream_error(const openai::RequestError& e) override;

 private:
  enum class Block { kNone, kThinking, kText, kToolUse };
  // Closes the open block and opens `kind` (its start event `start`).
  std::string open(Block kind, Json start);
  std::string close();

  std::string id_, model_;
  Block open_ = Block::kNone;
  int num_blocks_ = 0;  // blocks opened so far (the open one is num_blocks_ - 1)
};

}  // namespace kvlm::anthropic
