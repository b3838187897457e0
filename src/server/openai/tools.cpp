#include "server/openai/tools.h"

#include <cctype>

#include <fmt/format.h>

#include "server/openai/fields.h"

namespace kvlm::openai {
namespace {

// OpenAI's rule for function names; it also keeps them safe to write bare
// inside the quotes of a tool-call grammar.
bool valid_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  return true;
}

void check_tool(const Json& tool, const std::string& where) {
  if (!tool.is_object()) invalid_field(where, fmt::format("'{}' must be an object", where));
  if (tool.value("type", "") != "function")
    invalid_field(where + ".type", fmt::format("'{}.type' must be \"function\"", where));
  const Json* fn = field(tool, "function");
  if (!fn || !fn->is_object()) invalid_field(where + ".function", fmt::format("'{}.function' must be an object", where));
  const Json* name = field(*fn, "name");
  if (!name || !name->is_string() || !valid_name(name->get<std::string>()))
    invalid_field(where + ".function.name",
                  fmt::format("'{}.function.name' must be 1 to 64 letters, digits, '_' or '-'", where));
  if (const Json* d = field(*fn, "description"); d && !d->is_string())
    invalid_field(where + ".function.description", fmt::format("'{}.function.description' must be a string", where));
  if (const Json* p = field(*fn, "parameters"); p && !p->is_object())
    invalid_field(where + ".function.parameters",
                  fmt::format("'{}.function.parameters' must be a JSON Schema object", where));
}

bool has_tool(const Json& tools, const std::string& name) {
  for (const Json& t : tools)
    if (t["function"]["name"] == name) return true;
  return false;
}

ToolChoice parse_tool_choice(const Json* choice, const Json& tools) {
  ToolChoice c;
  if (!choice) return c;
  if (choice->is_string()) {
    const std::string s = choice->get<std::string>();
    if (s == "auto") return c;
    if (s == "none") c.kind = ToolChoice::Kind::kNone;
    else if (s == "required") c.kind = ToolChoice::Kind::kRequired;
    else invalid_field("tool_choice", "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
  } else if (choice->is_object() && choice->value("type", "") == "function" && field(*choice, "function") &&
             (*choice)["function"].is_object() && (*choice)["function"].contains("name") &&
             (*choice)["function"]["name"].is_string()) {
    c.kind = ToolChoice::Kind::kNamed;
    c.name = (*choice)["function"]["name"].get<std::string>();
  } else {
    invalid_field("tool_choice", "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
  }
  if (c.kind != ToolChoice::Kind::kAuto && c.kind != ToolChoice::Kind::kNone && tools.is_null())
    invalid_field("tool_choice", "'tool_choice' needs 'tools'");
  if (c.kind == ToolChoice::Kind::kNamed && !has_tool(tools, c.name))
    invalid_field("tool_choice", fmt::format("'tool_choice' names function '{}', which is not in 'tools'", c.name));
  return c;
}

}  // namespace

void parse_tools(const Json& body, ChatRequest& r) {
  r.tools = nullptr;
  if (const Json* tools = field(body, "tools")) {
    if (!tools->is_array()) invalid_field("tools", "'tools' must be an array of {\"type\": \"function\", \"function\": {...}}");
    for (size_t i = 0; i < tools->size(); ++i) check_tool((*tools)[i], fmt::format("tools[{}]", i));
    if (!tools->empty()) r.tools = *tools;
  }
  r.tool_choice = parse_tool_choice(field(body, "tool_choice"), r.tools);
  r.parallel_tool_calls = bool_field(body, "parallel_tool_calls").value_or(true);
}

void check_message_tools(const Json& m, const std::string& where) {
  const std::string role = m["role"].get<std::string>();
  if (role == "tool") {
    const Json* id = field(m, "tool_call_id");
    if (!id || !id->is_string())
      invalid_field(where + ".tool_call_id", fmt::format("'{}.tool_call_id' must be the id of the call it answers", where));
    return;
  }
  const Json* calls = field(m, "tool_calls");
  if (!calls) return;
  if (role != "assistant") invalid_field(where + ".tool_calls", "only assistant messages may have 'tool_calls'");
  if (!calls->is_array()) invalid_field(where + ".tool_calls", fmt::format("'{}.tool_calls' must be an array", where));
  for (size_t j = 0; j < calls->size(); ++j) {
    const Json& c = (*calls)[j];
    const std::string at = fmt::format("{}.tool_calls[{}]", where, j);
    if (!c.is_object() || !field(c, "id") || !c["id"].is_string())
      invalid_field(at + ".id", fmt::format("'{}.id' must be a string", at));
    const Json* fn = field(c, "function");
    if (!fn || !fn->is_object() || !field(*fn, "name") || !(*fn)["name"].is_string())
      invalid_field(at + ".function.name", fmt::format("'{}.function.name' must be a string", at));
    const Json* args = field(*fn, "arguments");
    if (!args || !args->is_string())
      invalid_field(at + ".function.arguments", fmt::format("'{}.function.arguments' must be a JSON text (a string)", at));
  }
}

}  // namespace kvlm::openai
