#include "chat/tool_prompt.h"

namespace kvlm {

using Json = nlohmann::ordered_json;

Json template_messages(ToolCallFormat f, const Json& messages) {
  Json out = messages;
  if (f == ToolCallFormat::kDeepSeek) return out;
  for (Json& m : out) {
    const auto calls = m.find("tool_calls");
    if (calls == m.end() || !calls->is_array()) continue;
    for (Json& call : *calls) {
      const auto fn = call.find("function");
      if (fn == call.end() || !fn->is_object()) continue;
      const auto args = fn->find("arguments");
      if (args == fn->end() || !args->is_string()) continue;
      Json parsed = Json::parse(args->get_ref<const std::string&>(), nullptr, /*allow_exceptions=*/false);
      if (!parsed.is_discarded()) *args = std::move(parsed);
    }
  }
  return out;
}

namespace {

std::string reply_format(ToolCallFormat f) {
  const ToolCallShape s = tool_call_shape(f);
  const std::string call = s.call_prefix + "TOOL_NAME" + s.name_to_arguments + "{ARGUMENTS}" + s.call_suffix;
  std::string text = "To call a tool, reply with exactly:\n" + s.prefix + call + s.suffix + "\n";
  if (s.parallel) text += "(more calls: separate them with \"" + s.separator + "\" inside the same reply)\n";
  if (f == ToolCallFormat::kGeneric) text += "To answer without a tool, reply with {\"response\": \"YOUR ANSWER\"}.\n";
  return text;
}

}  // namespace

std::string tools_system_prompt(ToolCallFormat f, const Json& tools) {
  std::string text = "You can call these tools (each with the JSON Schema of its arguments):\n";
  for (const Json& t : tools) text += t.dump() + "\n";
  text += "\n" + reply_format(f) +
          "where TOOL_NAME is one of the tools above and {ARGUMENTS} a JSON object valid against its schema. "
          "The tool results come back in the next message.";
  return text;
}

Json with_tools_prompt(const Json& messages, const std::string& text, bool into_system) {
  Json out = messages;
  const char* role = into_system ? "system" : "user";
  for (Json& m : out) {
    if (m.value("role", "") != role) continue;
    const auto content = m.find("content");
    const std::string old = content != m.end() && content->is_string() ? content->get<std::string>() : "";
    m["content"] = text + (old.empty() ? "" : "\n\n" + old);
    return out;
  }
  if (!into_system) return out;  // no user message: nowhere to put it
  out.insert(out.begin(), Json{{"role", "system"}, {"content", text}});
  return out;
}

}  // namespace kvlm
