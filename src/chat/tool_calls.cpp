// Format detection, shapes and the helpers every tool-call parser uses.
#include "chat/tool_calls.h"

#include "chat/tool_calls_impl.h"

namespace kvlm {

using namespace tool_calls;

std::string_view tool_call_format_name(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::kHermes: return "hermes";
    case ToolCallFormat::kLlama3: return "llama3";
    case ToolCallFormat::kMistral: return "mistral";
    case ToolCallFormat::kDeepSeek: return "deepseek";
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
    case ToolCallFormat::kGeneric: break;
  }
  return parse_generic(text);
}

size_t tool_call_start(ToolCallFormat f, std::string_view text) {
  constexpr size_t npos = std::string_view::npos;
  switch (f) {
    case ToolCallFormat::kHermes: return marker_start(text, kHermesOpen);
    case ToolCallFormat::kMistral: return marker_start(text, kMistralCalls);
    case ToolCallFormat::kDeepSeek:
      return std::min(marker_start(text, kDeepSeekCallsBegin), marker_start(text, kDeepSeekCallBegin));
    case ToolCallFormat::kLlama3: {
      // A JSON call is the whole reply: undecided while only space has come.
      const size_t first = skip_space(text, 0);
      if (first == text.size() || text[first] == '{') return 0;
      return marker_start(text, kPythonTag);
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

std::optional<std::vector<ToolCall>> calls_from_array(const Json& items, std::initializer_list<const char*> keys) {
  std::vector<ToolCall> calls;
  for (const Json& item : items) {
    auto call = call_from_object(item, keys);
    if (!call) return std::nullopt;
    calls.push_back(std::move(*call));
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
