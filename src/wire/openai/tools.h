// Validation of the tool-calling fields of a chat request (`tools`,
// `tool_choice`, `parallel_tool_calls`, and tool calls and results in the
// messages). Internal to wire/openai/: it throws FieldError (fields.h).
#pragma once

#include <string>

#include "wire/openai/protocol.h"

namespace kvlm::openai {

// Sets r.tools, r.tool_choice and r.parallel_tool_calls from the body; the
// legacy `functions` and `function_call` become tools and a tool choice
// (r.legacy_functions). Shapes only: nothing is compiled.
void parse_tools(const Json& body, ChatRequest& r);
// Compiles each strict function's schema of r.tools (compile_grammars,
// protocol.h): a keyword the grammar cannot enforce throws FieldError on
// its `parameters`.
void check_strict_tools(const ChatRequest& r, constrain::GrammarCache* grammars);
// The legacy function calls of a conversation so far: the id given to the
// latest assistant `function_call`, which the next `function` message answers.
struct LegacyCalls {
  int num_calls = 0;
  std::string last_id;
};
// A message of the legacy function API as the tool API spells it: an
// assistant message's `function_call` becomes a one-call `tool_calls` (its id
// 9 letters and digits, which every template takes), a `function` message
// the `tool` message answering the latest such call. Others come back as
// they are.
Json legacy_function_message(const Json& message, const std::string& where, LegacyCalls& calls);
// Checks one message's tool parts: an assistant message's `tool_calls`, a
// tool message's `tool_call_id`. `where` names it ("messages[2]").
void check_message_tools(const Json& message, const std::string& where);

}  // namespace kvlm::openai
