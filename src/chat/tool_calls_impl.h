// Pieces the per-format tool-call parsers (tool_calls_<format>.cpp) share.
// Internal to src/chat/.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/tool_calls.h"

namespace kvlm::tool_calls {

using Json = nlohmann::ordered_json;

// Model output is untrusted: JSON deeper than this is not a call.
constexpr int kMaxDepth = 64;

// The end offset of the JSON object or array that starts at text[pos]
// (strings and escapes respected), or nullopt when it is not closed in
// `text`, nests deeper than kMaxDepth, or text[pos] opens neither.
std::optional<size_t> json_end(std::string_view text, size_t pos);
// text[pos, end) parsed, or nullopt (never throws).
std::optional<Json> parse_json_at(std::string_view text, size_t pos, size_t end);
// pos advanced past spaces, tabs and newlines.
size_t skip_space(std::string_view text, size_t pos);
// Whether text[pos..] holds only whitespace.
bool only_space(std::string_view text, size_t pos);

// A call from an object {"name": "...", <args_key>: {...} or "<json text>"}
// with args_key one of `keys` (the first present wins; none: "{}"); nullopt
// when the name is missing or not a string, or the arguments are not an object.
std::optional<ToolCall> call_from_object(const Json& obj, std::initializer_list<const char*> keys);
// The calls of a JSON array of call objects (as call_from_object reads them
// with `keys`), or nullopt when the array is empty or any item is no call.
std::optional<std::vector<ToolCall>> calls_from_array(const Json& items, std::initializer_list<const char*> keys);
// Arguments as compact JSON text: an object as is, or a string holding a
// JSON object's text; nullopt otherwise.
std::optional<std::string> arguments_text(const Json& args);

// Where `marker` starts in text (the earliest), or a proper prefix of it
// ends text; npos when neither.
size_t marker_start(std::string_view text, std::string_view marker);

// The per-format parsers.
ParsedToolCalls parse_hermes(std::string_view text);
ParsedToolCalls parse_llama3(std::string_view text);
ParsedToolCalls parse_mistral(std::string_view text);
ParsedToolCalls parse_deepseek(std::string_view text);
ParsedToolCalls parse_generic(std::string_view text);

// Markers.
inline constexpr std::string_view kHermesOpen = "<tool_call>";
inline constexpr std::string_view kHermesClose = "</tool_call>";
inline constexpr std::string_view kPythonTag = "<|python_tag|>";
inline constexpr std::string_view kMistralCalls = "[TOOL_CALLS]";
inline constexpr std::string_view kDeepSeekCallsBegin = "<｜tool▁calls▁begin｜>";
inline constexpr std::string_view kDeepSeekCallsEnd = "<｜tool▁calls▁end｜>";
inline constexpr std::string_view kDeepSeekCallBegin = "<｜tool▁call▁begin｜>";
inline constexpr std::string_view kDeepSeekCallEnd = "<｜tool▁call▁end｜>";
inline constexpr std::string_view kDeepSeekSep = "<｜tool▁sep｜>";

// Plain content: what every parser answers for output that is not a call.
inline ParsedToolCalls plain(std::string_view text) { return {std::string(text), {}}; }

}  // namespace kvlm::tool_calls
