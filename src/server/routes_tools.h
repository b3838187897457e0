// Tool calling in /v1/chat/completions, between the protocol (validated
// tools and tool_choice) and src/chat/ (formats, parsers, the tools prompt).
// Internal to server/.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chat/tool_calls.h"
#include "server/openai/protocol.h"
#include "server/routes.h"

namespace kvlm {

namespace constrain {
class Program;
}

// The messages and extra variables the template renders for request `r`:
// tool calls' arguments as objects (tool_prompt.h), and, when the template
// does not render tools and tool_choice is not none, the tools described in a
// system prompt.
struct TemplateInput {
  openai::Json messages;
  openai::Json extra;
  // The description goes into the first user message instead of a system
  // message (for templates that refuse a system role): the fallback to try.
  std::optional<openai::Json> messages_without_system;
};
TemplateInput template_input(const ServerContext& ctx, const openai::ChatRequest& r);

// tool_choice required or named: a grammar that makes the output exactly
// calls in the template's format, each {name, arguments} with the name one
// of the tools (or the named one) and the arguments valid against its
// `parameters` schema (constrain/json_schema.h); one call, or several when
// parallel and the format allows. nullptr for auto and none. Throws
// Error(kInvalidArgument) for a parameters schema the compiler refuses.
std::shared_ptr<const constrain::Program> tool_call_constraint(ToolCallFormat f, const openai::ChatRequest& r);

// A fresh call id: "call_" and 24 hex digits, or for Mistral, whose template
// insists on them, 9 letters and digits.
std::string new_tool_call_id(ToolCallFormat f);
// The `tool_calls` array of a message, with fresh ids.
openai::Json tool_calls_json(ToolCallFormat f, const std::vector<ToolCall>& calls);

}  // namespace kvlm
