// Hermes 2 Pro / Qwen2.5: each call is a JSON object between <tool_call> and
// </tool_call>, with text allowed around them:
//   I'll look that up.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>
#include "chat/tool_calls_impl.h"

namespace kvlm::tool_calls {

ParsedToolCalls parse_hermes(std::string_view text) {
  ParsedToolCalls out;
  size_t pos = 0;
  while (true) {
    const size_t open = text.find(kHermesOpen, pos);
    if (open == std::string_view::npos) {
      out.content.append(text.substr(pos));
      break;
    }
    out.content.append(text.substr(pos, open - pos));
    const size_t start = skip_space(text, open + kHermesOpen.size());
    const auto end = json_end(text, start);
    if (!end) return plain(text);
    auto call = call_at(text, start, *end, {"arguments", "parameters"});
    if (!call) return plain(text);
    out.calls.push_back(std::move(*call));
    const size_t after = skip_space(text, *end);
    if (text.substr(after, kHermesClose.size()) == kHermesClose) {
      pos = after + kHermesClose.size();
    } else if (after == text.size()) {
      pos = after;  // the model stopped before closing its last call: still a call
    } else {
      return plain(text);
    }
  }
  return out;
}

}  // namespace kvlm::tool_calls
