// Mistral (v0.3, Nemo): [TOOL_CALLS] then a JSON array of calls, after
// optional text:
//   [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]
// A single object instead of the array, and "arguments" given as JSON text,
// are taken too (both are seen in the wild).
#include "chat/tool_calls_impl.h"

namespace kvlm::tool_calls {

ParsedToolCalls parse_mistral(std::string_view text) {
  const size_t marker = text.find(kMistralCalls);
  if (marker == std::string_view::npos) return plain(text);
  const size_t start = skip_space(text, marker + kMistralCalls.size());
  const auto end = json_end(text, start);
  if (!end || !only_space(text, *end)) return plain(text);
  if (!parse_json_at(text, start, *end)) return plain(text);
  auto calls = calls_at(text, start, *end, {"arguments", "parameters"});
  if (!calls) return plain(text);
  return {std::string(text.substr(0, marker)), std::move(*calls)};
}

}  // namespace kvlm::tool_calls
