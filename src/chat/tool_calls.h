// Tool calls in a model's output. Each model family writes its calls its own
// way; the chat template's source says which (its own tool-call markup), and
// a template that knows no tools gets the generic format, in which the tools
// are described in a system prompt and the model answers with JSON:
//
//   format   | what the model writes
//   hermes   | text <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call> (Hermes 2 Pro, Qwen2.5), repeated
//   llama3   | {"name": N, "parameters": {...}} as the whole reply, or <|python_tag|> before it (Llama 3.1/3.2);
//            | <|python_tag|>N.call(k="v", ...) for a built-in tool
//   mistral  | text [TOOL_CALLS][{"name": N, "arguments": {...}}, ...]
//   deepseek | text <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N\n```json\n{...}\n```<｜tool▁call▁end｜>...
//            | <｜tool▁calls▁end｜> (DeepSeek-R1 and its distills)
//   generic  | {"tool_calls": [{"name": N, "arguments": {...}}]} or {"tool_call": {...}}, or {"response": "text"}
//   pythonic | [N(k="v", n=1), M()] as the whole reply (Llama 3.2's zero-shot form, Llama 4); llama3 takes it too
//
// Arguments come back as compact JSON text of an object: an object as the
// model wrote it, without the space between tokens (so a stream of its
// pieces adds up to it); arguments given as JSON text, or in Python syntax,
// re-serialized.
//
// Parsing never fails: output that does not follow its format (broken JSON,
// a call without a name) is plain content with no calls; an output cut off
// by max_tokens has its own parser (parse_cut_tool_calls).
//
//   const ToolCallFormat f = detect_tool_call_format(template_source);
//   ParsedToolCalls p = parse_tool_calls(f, output);
//   if (!p.calls.empty()) ... p.calls[0].name, p.calls[0].arguments (JSON text of an object)
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace kvlm {

enum class ToolCallFormat { kGeneric, kHermes, kLlama3, kMistral, kDeepSeek, kPythonic };

// "generic", "hermes", "llama3", "mistral", "deepseek", "pythonic".
std::string_view tool_call_format_name(ToolCallFormat f);
// The format a template's model writes, from the markup in its source.
ToolCallFormat detect_tool_call_format(std::string_view template_source);
// Whether the template reads the `tools` variable at all; when it does not,
// the tools are described in a system prompt (tool_prompt.h).
bool template_renders_tools(std::string_view template_source);

struct ToolCall {
  std::string name;
  std::string arguments;  // compact JSON text of an object ("{}" when the model gave none)
};

struct ParsedToolCalls {
  // The output's text outside the calls, verbatim (whitespace kept), in order.
  std::string content;
  std::vector<ToolCall> calls;  // empty: the output is plain content
};

// Parses a whole output.
ParsedToolCalls parse_tool_calls(ToolCallFormat f, std::string_view text);

// An output cut off by max_tokens inside its calls (OpenAI answers such a
// call as a call, finish_reason "length"): `content` is the text before and
// between the calls (a marker begun at its very end dropped: it is call
// markup being written), `calls` those written in full and then the one cut,
// with its name and its arguments' text so far ("" before they began); a
// call cut before its name began is left out. An output that is no call
// (JSON that is not a call, for the formats whose call is the whole reply)
// is plain content.
struct CutToolCalls {
  std::string content;
  std::vector<ToolCall> calls;
  bool name_cut = false;  // the last call's name is only the beginning of what the model was writing
  bool last_open = false;  // the last call is the one cut (else every call is whole)
};
CutToolCalls parse_cut_tool_calls(ToolCallFormat f, std::string_view text);

// For streaming: the offset in `text` (an output so far) from which it may
// be a tool call, already begun or about to begin (a partial marker at its
// end); std::string_view::npos when nothing in it may be one. The text before
// the offset is content whatever comes next.
size_t tool_call_start(ToolCallFormat f, std::string_view text);

// The literal text around calls in a format, for a grammar that forces calls:
//   prefix (call_prefix NAME name_to_arguments ARGUMENTS call_suffix)
//          (separator call_prefix ... call_suffix)* suffix
// NAME is written bare (tool names are [A-Za-z0-9_-]); ARGUMENTS is a JSON
// object, except for pythonic, whose ARGUMENTS are keyword arguments
// (k=VALUE, ...; tool_calls_pythonic.cpp).
struct ToolCallShape {
  std::string prefix, call_prefix, name_to_arguments, call_suffix, separator, suffix;
  bool parallel = true;  // false: the format holds one call per reply (llama3)
};
ToolCallShape tool_call_shape(ToolCallFormat f);

}  // namespace kvlm
