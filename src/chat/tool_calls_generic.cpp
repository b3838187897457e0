// The generic format, for templates that know no tools: the system prompt
// (tool_prompt.h) asks for a JSON reply,
//   {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}
// or {"response": "text"} to answer in words; {"tool_call": {...}} (one call)
// is taken too. Anything else is the model's plain answer.
#include "chat/tool_calls_impl.h"

namespace kvlm::tool_calls {

ParsedToolCalls parse_generic(std::string_view text) {
  const size_t start = skip_space(text, 0);
  const auto end = json_end(text, start);
  if (!end || !only_space(text, *end)) return plain(text);
  const auto value = parse_json_at(text, start, *end);
  if (!value || !value->is_object()) return plain(text);
  if (const auto r = value->find("response"); r != value->end() && r->is_string() && value->size() == 1)
    return {r->get<std::string>(), {}};
  std::string_view items;
  if (const auto calls = value->find("tool_calls"); calls != value->end() && calls->is_array()) {
    items = member_text(text, start, "tool_calls");
  } else if (const auto call = value->find("tool_call"); call != value->end() && call->is_object()) {
    items = member_text(text, start, "tool_call");
  } else {
    return plain(text);
  }
  auto calls = calls_at(items, 0, items.size(), {"arguments", "parameters"});
  if (!calls) return plain(text);
  return {"", std::move(*calls)};
}

}  // namespace kvlm::tool_calls
