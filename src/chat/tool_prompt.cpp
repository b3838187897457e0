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

bool template_renders_tool_calls(std::string_view src) { return src.find("tool_calls") != std::string_view::npos; }

namespace {

// A call's ARGUMENTS as format `f` writes them: the JSON object, or for
// pythonic its members as keyword arguments with JSON values.
std::string arguments_written(ToolCallFormat f, const Json& args) {
  if (f != ToolCallFormat::kPythonic) return args.dump();
  std::string out;
  for (const auto& [k, v] : args.items()) out += (out.empty() ? "" : ", ") + k + "=" + v.dump();
  return out;
}

}  // namespace

Json plain_tool_messages(ToolCallFormat f, const Json& messages) {
  const ToolCallShape shape = tool_call_shape(f);
  Json out = Json::array();
  for (const Json& m : messages) {
    const std::string role = m.value("role", "");
    const auto content = m.find("content");
    const std::string text = content != m.end() && content->is_string() ? content->get<std::string>() : "";
    if (role == "tool") {
      const Json line = {{"tool_response", Json{{"tool_call_id", m.value("tool_call_id", "")}, {"content", text}}}};
      if (!out.empty() && out.back().value("role", "") == "user" && out.back().value("tool_results", false)) {
        out.back()["content"] = out.back()["content"].get<std::string>() + "\n" + line.dump();
      } else {
        out.push_back(Json{{"role", "user"}, {"content", line.dump()}, {"tool_results", true}});
      }
      continue;
    }
    const auto calls = m.find("tool_calls");
    if (role != "assistant" || calls == m.end() || !calls->is_array() || calls->empty()) {
      out.push_back(m);
      continue;
    }
    std::string written = shape.prefix;
    for (size_t i = 0; i < calls->size(); ++i) {
      const Json& fn = (*calls)[i]["function"];
      const Json args = fn["arguments"].is_string()
                            ? Json::parse(fn["arguments"].get<std::string>(), nullptr, /*allow_exceptions=*/false)
                            : fn["arguments"];
      written += (i ? shape.separator : "") + shape.call_prefix + fn["name"].get<std::string>() +
                 shape.name_to_arguments + arguments_written(f, args.is_object() ? args : Json::object()) +
                 shape.call_suffix;
    }
    written += shape.suffix;
    out.push_back(Json{{"role", "assistant"}, {"content", text.empty() ? written : text + "\n" + written}});
  }
  // The marker that merged tool results is ours, not the template's.
  for (Json& m : out) m.erase("tool_results");
  return out;
}

namespace {

std::string reply_format(ToolCallFormat f) {
  const ToolCallShape s = tool_call_shape(f);
  const char* args = f == ToolCallFormat::kPythonic ? "ARG_NAME=VALUE, ..." : "{ARGUMENTS}";
  const std::string call = s.call_prefix + "TOOL_NAME" + s.name_to_arguments + args + s.call_suffix;
  std::string text = "To call a tool, reply with exactly:\n" + s.prefix + call + s.suffix + "\n";
  if (s.parallel) text += "(more calls: separate them with \"" + s.separator + "\" inside the same reply)\n";
  if (f == ToolCallFormat::kGeneric) text += "To answer without a tool, reply with {\"response\": \"YOUR ANSWER\"}.\n";
  return text;
}

}  // namespace

std::string tools_system_prompt(ToolCallFormat f, const Json& tools) {
  std::string text = "You can call these tools (each with the JSON Schema of its arguments):\n";
  for (const Json& t : tools) text += t.dump() + "\n";
  // Appended piece by piece: GCC 12 warns (-Wrestrict, a false positive) on
  // a literal + std::string temporary here.
  text += '\n';
  text += reply_format(f);
  text += "where TOOL_NAME is one of the tools above and {ARGUMENTS} a JSON object valid against its schema. "
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

ToolPromptMessages tool_prompt_messages(std::string_view template_source, const Json& messages, const Json& tools,
                                        bool describe_tools) {
  const ToolCallFormat f = detect_tool_call_format(template_source);
  ToolPromptMessages out{template_messages(f, messages), std::nullopt};
  if (!template_renders_tool_calls(template_source)) out.messages = plain_tool_messages(f, out.messages);
  if (tools.is_null() || tools.empty() || !describe_tools || template_renders_tools(template_source)) return out;
  const std::string text = tools_system_prompt(f, tools);
  out.without_system = with_tools_prompt(out.messages, text, /*into_system=*/false);
  out.messages = with_tools_prompt(out.messages, text, /*into_system=*/true);
  return out;
}

}  // namespace kvlm
