// Llama 3.1 / 3.2 (custom tools): the whole reply is one JSON object,
//   {"name": "get_weather", "parameters": {"city": "Paris"}}
// optionally after <|python_tag|> (the ipython environment), where built-in
// tools are called in Python syntax instead:
//   <|python_tag|>brave_search.call(query="weather in Paris")
// Several JSON calls separated by ';' (seen from 3.2) are taken too, and
// 3.2's pythonic list, [get_weather(city="Paris")] (tool_calls_pythonic.cpp).
#include <cctype>

#include "chat/tool_calls_impl.h"

namespace kvlm::tool_calls {
namespace {

// JSON objects separated by optional ';' and space, filling text[pos..] exactly.
bool parse_json_calls(std::string_view text, size_t pos, std::vector<ToolCall>& calls) {
  pos = skip_space(text, pos);
  while (pos < text.size()) {
    const auto end = json_end(text, pos);
    if (!end) return false;
    auto call = call_at(text, pos, *end, {"parameters", "arguments"});
    if (!call) return false;
    calls.push_back(std::move(*call));
    pos = skip_space(text, *end);
    if (pos < text.size() && text[pos] == ';') pos = skip_space(text, pos + 1);
  }
  return !calls.empty();
}

bool is_ident(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// One keyword argument's value at text[pos]: a JSON string, number, true,
// false or null; its end offset, or nullopt.
std::optional<size_t> python_value(std::string_view text, size_t pos, Json& value) {
  size_t end = pos;
  if (pos < text.size() && text[pos] == '"') {
    for (end = pos + 1; end < text.size() && text[end] != '"'; ++end)
      if (text[end] == '\\') ++end;
    if (end >= text.size()) return std::nullopt;
    ++end;
  } else {
    while (end < text.size() && text[end] != ',' && text[end] != ')') ++end;
  }
  auto v = parse_json_at(text, pos, end);
  if (!v || v->is_structured()) return std::nullopt;
  value = std::move(*v);
  return end;
}

// tool.call(key="value", n=3) filling text[pos..] (a built-in tool).
std::optional<ToolCall> parse_python_call(std::string_view text, size_t pos) {
  pos = skip_space(text, pos);
  size_t p = pos;
  while (p < text.size() && is_ident(text[p])) ++p;
  if (p == pos || text.substr(p, 6) != ".call(") return std::nullopt;
  ToolCall call{std::string(text.substr(pos, p - pos)), ""};
  Json args = Json::object();
  p += 6;
  while (true) {
    p = skip_space(text, p);
    if (p < text.size() && text[p] == ')') break;
    const size_t key_start = p;
    while (p < text.size() && is_ident(text[p])) ++p;
    if (p == key_start || p >= text.size() || text[p] != '=') return std::nullopt;
    const std::string key(text.substr(key_start, p - key_start));
    Json value;
    const auto end = python_value(text, skip_space(text, p + 1), value);
    if (!end) return std::nullopt;
    args[key] = std::move(value);
    p = skip_space(text, *end);
    if (p < text.size() && text[p] == ',') ++p;
  }
  if (!only_space(text, p + 1)) return std::nullopt;
  call.arguments = args.dump();
  return call;
}

}  // namespace

ParsedToolCalls parse_llama3(std::string_view text) {
  ParsedToolCalls out;
  const size_t tag = text.find(kPythonTag);
  if (tag != std::string_view::npos) {
    out.content = std::string(text.substr(0, tag));
    const size_t body = tag + kPythonTag.size();
    if (parse_json_calls(text, body, out.calls)) return out;
    out.calls.clear();
    if (auto call = parse_python_call(text, body)) {
      out.calls.push_back(std::move(*call));
      return out;
    }
    return plain(text);
  }
  const size_t start = skip_space(text, 0);
  // Llama 3.2 also answers in its zero-shot pythonic form, [f(a=1)].
  if (starts_pythonic_list(text, start)) return parse_pythonic(text);
  if (start == text.size() || text[start] != '{' || !parse_json_calls(text, start, out.calls)) return plain(text);
  return out;
}

}  // namespace kvlm::tool_calls
