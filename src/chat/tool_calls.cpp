// Format detection, shapes and the helpers every tool-call parser uses.
#include "chat/tool_calls.h"

#include <cstring>

#include "chat/tool_calls_impl.h"

namespace kvlm {

using namespace tool_calls;

std::string_view tool_call_format_name(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::kHermes: return "hermes";
    case ToolCallFormat::kLlama3: return "llama3";
    case ToolCallFormat::kMistral: return "mistral";
    case ToolCallFormat::kDeepSeek: return "deepseek";
    case ToolCallFormat::kPythonic: return "pythonic";
    case ToolCallFormat::kGeneric: break;
  }
  return "generic";
}

ToolCallFormat detect_tool_call_format(std::string_view src) {
  // The markup a template writes for an assistant message's tool_calls is
  // the markup its model was trained to produce.
  if (src.find(kHermesOpen) != std::string_view::npos) return ToolCallFormat::kHermes;
  if (src.find(kMistralCalls) != std::string_view::npos) return ToolCallFormat::kMistral;
  if (src.find(kDeepSeekCallsBegin) != std::string_view::npos) return ToolCallFormat::kDeepSeek;
  // Llama 3.2's pythonic prompt (and Llama 4's): "[func_name1(params_name1=params_value1, ...)]".
  if (src.find("[func_name1(") != std::string_view::npos) return ToolCallFormat::kPythonic;
  if (src.find(kPythonTag) != std::string_view::npos ||
      (src.find("<|start_header_id|>") != std::string_view::npos && src.find("\"parameters\"") != std::string_view::npos))
    return ToolCallFormat::kLlama3;
  return ToolCallFormat::kGeneric;
}

bool template_renders_tools(std::string_view src) { return src.find("tools") != std::string_view::npos; }

ToolCallShape tool_call_shape(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::kHermes:
      return {"", "<tool_call>\n{\"name\": \"", "\", \"arguments\": ", "}\n</tool_call>", "\n", "", true};
    case ToolCallFormat::kLlama3:
      return {"", "{\"name\": \"", "\", \"parameters\": ", "}", "", "", false};
    case ToolCallFormat::kMistral:
      return {"[TOOL_CALLS][", "{\"name\": \"", "\", \"arguments\": ", "}", ", ", "]", true};
    case ToolCallFormat::kDeepSeek:
      return {std::string(kDeepSeekCallsBegin), std::string(kDeepSeekCallBegin) + "function" + std::string(kDeepSeekSep),
              "\n```json\n", "\n```" + std::string(kDeepSeekCallEnd), "\n", std::string(kDeepSeekCallsEnd), true};
    case ToolCallFormat::kPythonic:
      return {"[", "", "(", ")", ", ", "]", true};
    case ToolCallFormat::kGeneric: break;
  }
  return {"{\"tool_calls\": [", "{\"name\": \"", "\", \"arguments\": ", "}", ", ", "]}", true};
}

ParsedToolCalls parse_tool_calls(ToolCallFormat f, std::string_view text) {
  switch (f) {
    case ToolCallFormat::kHermes: return parse_hermes(text);
    case ToolCallFormat::kLlama3: return parse_llama3(text);
    case ToolCallFormat::kMistral: return parse_mistral(text);
    case ToolCallFormat::kDeepSeek: return parse_deepseek(text);
    case ToolCallFormat::kPythonic: return parse_pythonic(text);
    case ToolCallFormat::kGeneric: break;
  }
  return parse_generic(text);
}

CutToolCalls parse_cut_tool_calls(ToolCallFormat f, std::string_view text) {
  switch (f) {
    case ToolCallFormat::kHermes: return cut_hermes(text);
    case ToolCallFormat::kLlama3: return cut_llama3(text);
    case ToolCallFormat::kMistral: return cut_mistral(text);
    case ToolCallFormat::kDeepSeek: return cut_deepseek(text);
    case ToolCallFormat::kPythonic: return cut_pythonic(text);
    case ToolCallFormat::kGeneric: break;
  }
  return cut_generic(text);
}

size_t tool_call_start(ToolCallFormat f, std::string_view text) {
  constexpr size_t npos = std::string_view::npos;
  switch (f) {
    case ToolCallFormat::kHermes: return marker_start(text, kHermesOpen);
    case ToolCallFormat::kMistral: return marker_start(text, kMistralCalls);
    case ToolCallFormat::kDeepSeek:
      return std::min(marker_start(text, kDeepSeekCallsBegin), marker_start(text, kDeepSeekCallBegin));
    case ToolCallFormat::kLlama3: {
      // A JSON call (or a pythonic list) is the whole reply: undecided while only space has come.
      const size_t first = skip_space(text, 0);
      if (first == text.size() || text[first] == '{' || text[first] == '[') return 0;
      return marker_start(text, kPythonTag);
    }
    case ToolCallFormat::kPythonic: {
      const size_t first = skip_space(text, 0);
      return first == text.size() || text[first] == '[' ? 0 : npos;
    }
    case ToolCallFormat::kGeneric: break;
  }
  const size_t first = skip_space(text, 0);
  return first == text.size() || text[first] == '{' ? 0 : npos;
}

namespace tool_calls {

std::optional<size_t> json_end(std::string_view text, size_t pos) {
  if (pos >= text.size() || (text[pos] != '{' && text[pos] != '[')) return std::nullopt;
  int depth = 0;
  bool in_string = false;
  for (size_t i = pos; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxDepth) return std::nullopt;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::nullopt;
}

std::optional<Json> parse_json_at(std::string_view text, size_t pos, size_t end) {
  Json j = Json::parse(text.substr(pos, end - pos), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

size_t skip_space(std::string_view text, size_t pos) {
  while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\n' || text[pos] == '\t' || text[pos] == '\r')) ++pos;
  return pos;
}

bool only_space(std::string_view text, size_t pos) { return skip_space(text, pos) == text.size(); }

std::optional<std::string> arguments_text(const Json& args) {
  if (args.is_object()) return args.dump();
  if (!args.is_string()) return std::nullopt;
  // Some models (and OpenAI itself) give the arguments as JSON text.
  const std::string& s = args.get_ref<const std::string&>();
  const size_t start = skip_space(s, 0);
  const auto end = json_end(s, start);
  if (!end || !only_space(s, *end)) return std::nullopt;
  auto parsed = parse_json_at(s, start, *end);
  if (!parsed || !parsed->is_object()) return std::nullopt;
  return parsed->dump();
}

std::optional<ToolCall> call_from_object(const Json& obj, std::initializer_list<const char*> keys) {
  if (!obj.is_object()) return std::nullopt;
  const auto name = obj.find("name");
  if (name == obj.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) return std::nullopt;
  ToolCall call{name->get<std::string>(), "{}"};
  for (const char* key : keys) {
    const auto it = obj.find(key);
    if (it == obj.end()) continue;
    auto text = arguments_text(*it);
    if (!text) return std::nullopt;
    call.arguments = std::move(*text);
    break;
  }
  return call;
}

std::optional<size_t> string_end(std::string_view text, size_t pos) {
  for (size_t i = pos + 1; i < text.size(); ++i) {
    if (text[i] == '\\') {
      ++i;
    } else if (text[i] == '"') {
      return i + 1;
    }
  }
  return std::nullopt;
}

std::optional<size_t> value_end(std::string_view text, size_t pos) {
  if (text[pos] == '"') return string_end(text, pos);
  if (text[pos] == '{' || text[pos] == '[') return json_end(text, pos);
  size_t end = pos;
  while (end < text.size() && !std::strchr(",}] \n\t\r", text[end])) ++end;
  if (end == text.size()) return std::nullopt;
  return end;
}

std::string compact_json(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
      continue;
    } else if (c == '"') {
      in_string = true;
    }
    out += c;
  }
  return out;
}

std::string_view member_text(std::string_view text, size_t pos, std::string_view key) {
  std::string_view found;
  size_t p = skip_space(text, pos + 1);
  while (p < text.size() && text[p] == '"') {
    const auto key_end = string_end(text, p);
    if (!key_end) break;
    const auto k = parse_json_at(text, p, *key_end);
    p = skip_space(text, *key_end);
    if (p >= text.size() || text[p] != ':') break;
    p = skip_space(text, p + 1);
    const auto end = p < text.size() ? value_end(text, p) : std::nullopt;
    if (!end) break;
    // The last of duplicate keys wins, as the parser keeps it.
    if (k && k->is_string() && k->get_ref<const std::string&>() == key) found = text.substr(p, *end - p);
    p = skip_space(text, *end);
    if (p >= text.size() || text[p] != ',') break;
    p = skip_space(text, p + 1);
  }
  return found;
}

std::optional<ToolCall> call_at(std::string_view text, size_t pos, size_t end, std::initializer_list<const char*> keys) {
  const auto obj = parse_json_at(text, pos, end);
  if (!obj) return std::nullopt;
  auto call = call_from_object(*obj, keys);
  if (!call) return std::nullopt;
  for (const char* key : keys) {
    const auto it = obj->find(key);
    if (it == obj->end()) continue;
    if (it->is_object()) call->arguments = compact_json(member_text(text, pos, key));
    break;
  }
  return call;
}

std::optional<std::vector<ToolCall>> calls_at(std::string_view text, size_t pos, size_t end,
                                              std::initializer_list<const char*> keys) {
  std::vector<ToolCall> calls;
  if (text[pos] == '{') {
    auto call = call_at(text, pos, end, keys);
    if (!call) return std::nullopt;
    calls.push_back(std::move(*call));
    return calls;
  }
  size_t p = skip_space(text, pos + 1);
  while (p < end && text[p] != ']') {
    const auto item_end = json_end(text, p);
    if (!item_end || text[p] != '{') return std::nullopt;
    auto call = call_at(text, p, *item_end, keys);
    if (!call) return std::nullopt;
    calls.push_back(std::move(*call));
    p = skip_space(text, *item_end);
    if (p < end && text[p] == ',') p = skip_space(text, p + 1);
  }
  if (calls.empty()) return std::nullopt;
  return calls;
}

size_t marker_start(std::string_view text, std::string_view marker) {
  if (const size_t at = text.find(marker); at != std::string_view::npos) return at;
  // A proper prefix of the marker at the very end: the marker may be coming.
  for (size_t n = std::min(marker.size() - 1, text.size()); n > 0; --n)
    if (text.substr(text.size() - n) == marker.substr(0, n)) return text.size() - n;
  return std::string_view::npos;
}

}  // namespace tool_calls
}  // namespace kvlm
