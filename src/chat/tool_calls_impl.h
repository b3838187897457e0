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

// The end of the JSON string at text[pos] == '"' (past its closing quote), or
// nullopt when it is cut.
std::optional<size_t> string_end(std::string_view text, size_t pos);
// The end of the JSON value at text[pos], or nullopt when the text ends
// first (a scalar is ended by what follows it).
std::optional<size_t> value_end(std::string_view text, size_t pos);
// JSON text without the whitespace between its tokens, everything else as
// written. Compacting a prefix of a text gives a prefix of the whole text's
// compact form, so arguments streamed in pieces add up to the final ones.
std::string compact_json(std::string_view text);

// A call from an object {"name": "...", <args_key>: {...} or "<json text>"}
// with args_key one of `keys` (the first present wins; none: "{}"); nullopt
// when the name is missing or not a string, or the arguments are not an object.
std::optional<ToolCall> call_from_object(const Json& obj, std::initializer_list<const char*> keys);
// The raw text of member `key`'s value in the object at text[pos] == '{'
// (whole JSON), or "" when it has none.
std::string_view member_text(std::string_view text, size_t pos, std::string_view key);
// The call object text[pos, end) (pos at its '{'), as call_from_object
// reads it, but with object arguments as the model wrote them, compacted
// (compact_json): the text a stream of them adds up to.
std::optional<ToolCall> call_at(std::string_view text, size_t pos, size_t end, std::initializer_list<const char*> keys);
// The calls of the JSON array text[pos, end) (pos at its '['; a lone object
// is a list of one), or nullopt when it is empty or any item is no call.
std::optional<std::vector<ToolCall>> calls_at(std::string_view text, size_t pos, size_t end,
                                              std::initializer_list<const char*> keys);
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
ParsedToolCalls parse_pythonic(std::string_view text);

// The cut-output parsers (tool_calls_cut.cpp; DeepSeek's beside its parser).
CutToolCalls cut_hermes(std::string_view text);
CutToolCalls cut_llama3(std::string_view text);
CutToolCalls cut_mistral(std::string_view text);
CutToolCalls cut_deepseek(std::string_view text);
CutToolCalls cut_generic(std::string_view text);
CutToolCalls cut_pythonic(std::string_view text);
// A pythonic call list ("[f(a=1), g()]") fills text[pos..] but for space.
bool starts_pythonic_list(std::string_view text, size_t pos);
// The decoded text of a JSON string at text[pos] == '"' cut off before its
// closing quote (an escape cut in the middle dropped).
std::string cut_string(std::string_view text, size_t pos);
// text without a proper prefix of `marker` at its very end.
std::string_view without_partial_marker(std::string_view text, std::string_view marker);

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
