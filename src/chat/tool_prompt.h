// The prompt side of tool calling: an OpenAI request's messages made into
// what chat templates expect, and for templates that know no tools, a system
// prompt that describes them and the reply format (llama.cpp's approach).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "chat/tool_calls.h"

namespace kvlm {

// `messages` (OpenAI's shape, validated) as a template reads them: each
// assistant tool call's `function.arguments`, JSON text in OpenAI's API,
// becomes the object Hugging Face templates expect (Qwen's `arguments |
// tojson`), except for formats whose templates concatenate the text
// (DeepSeek's), which keep it. Arguments that are not JSON stay text.
nlohmann::ordered_json template_messages(ToolCallFormat f, const nlohmann::ordered_json& messages);

// For templates that know no tool messages (no "tool_calls" in their
// source, e.g. Gemma's, which refuses any role but user and assistant):
// each assistant tool call becomes the text of the call in format `f`
// appended to its message's content, and each run of tool messages one user
// message of {"tool_response": {"tool_call_id", "content"}} lines.
nlohmann::ordered_json plain_tool_messages(ToolCallFormat f, const nlohmann::ordered_json& messages);
bool template_renders_tool_calls(std::string_view template_source);

// The system prompt that tells a model of format `f` about `tools` (an
// OpenAI `tools` array) and how to call them; for templates that do not
// render tools themselves (template_renders_tools false).
std::string tools_system_prompt(ToolCallFormat f, const nlohmann::ordered_json& tools);

// `messages` with `text` before the first system message's content (or a new
// system message first); into_system false: before the first user
// message's content instead, for templates that refuse a system role.
nlohmann::ordered_json with_tools_prompt(const nlohmann::ordered_json& messages, const std::string& text,
                                         bool into_system);

// All of the above for one request, as the server and `kvlm template
// --tools` do it: the messages a template with source `template_source`
// renders, given `tools` (an OpenAI tools array, or null) and whether the
// model is to be told about them (tool_choice not none). When the template
// does not render tools, they are described in a system prompt; templates
// that refuse a system role get `without_system`, the description in the
// first user message, to try next.
struct ToolPromptMessages {
  nlohmann::ordered_json messages;
  std::optional<nlohmann::ordered_json> without_system;
};
ToolPromptMessages tool_prompt_messages(std::string_view template_source, const nlohmann::ordered_json& messages,
                                        const nlohmann::ordered_json& tools, bool describe_tools);

}  // namespace kvlm
