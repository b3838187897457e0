// Validation of the tool-calling fields of a chat request (`tools`,
// `tool_choice`, `parallel_tool_calls`, and tool calls and results in the
// messages). Internal to server/openai/: it throws FieldError (fields.h).
#pragma once

#include <string>

#include "server/openai/protocol.h"

namespace kvlm::openai {

// Sets r.tools, r.tool_choice and r.parallel_tool_calls from the body.
void parse_tools(const Json& body, ChatRequest& r);
// Checks one message's tool parts: an assistant message's `tool_calls`, a
// tool message's `tool_call_id`. `where` names it ("messages[2]").
void check_message_tools(const Json& message, const std::string& where);

}  // namespace kvlm::openai
