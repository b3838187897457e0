// Tool calls in an output cut off by max_tokens (parse_cut_tool_calls in
// tool_calls.h): the calls written in full, then the one cut, read as far as
// it goes. A call object is read key by key; the cut one gives its name (or
// the beginning of it) and the raw text of its arguments so far, which is
// what OpenAI's streamed argument deltas would have been.
#include <algorithm>
#include <cstring>

#include "chat/tool_calls_impl.h"

namespace kvlm::tool_calls {
namespace {

constexpr std::initializer_list<const char*> kArgumentKeys = {"arguments", "parameters"};

// What a call object that may be cut holds. `first_key` tells a call from
// other JSON; `complete`: the object closed (then it is parsed whole).
struct ObjectSoFar {
  std::optional<ToolCall> call;  // nullopt: its name had not begun
  bool name_cut = false;
  std::optional<std::string> first_key;
};

// Reads the object at text[pos] == '{' member by member until the text ends.
ObjectSoFar object_so_far(std::string_view text, size_t pos) {
  ObjectSoFar out;
  std::optional<std::string> name;
  std::string arguments;
  size_t p = pos + 1;
  while (true) {
    p = skip_space(text, p);
    if (p >= text.size() || text[p] != '"') break;
    const auto key_end = string_end(text, p);
    if (!key_end) break;
    const auto key_json = parse_json_at(text, p, *key_end);
    const std::string key = key_json && key_json->is_string() ? key_json->get<std::string>() : "";
    if (!out.first_key) out.first_key = key;
    p = skip_space(text, *key_end);
    if (p >= text.size() || text[p] != ':') break;
    p = skip_space(text, p + 1);
    if (p >= text.size()) break;
    const auto end = value_end(text, p);
    const bool is_arguments = std::find_if(kArgumentKeys.begin(), kArgumentKeys.end(),
                                           [&](const char* k) { return key == k; }) != kArgumentKeys.end();
    if (key == "name" && text[p] == '"') {
      const auto v = end ? parse_json_at(text, p, *end) : std::nullopt;
      name = v && v->is_string() ? v->get<std::string>() : cut_string(text, p);
      out.name_cut = !end;
    } else if (is_arguments) {
      // An object as written (compacted, so its pieces stream), a string of
      // JSON text once it is whole, else the text so far.
      const std::string_view raw = text.substr(p, end.value_or(text.size()) - p);
      const auto v = end && text[p] != '{' ? parse_json_at(text, p, *end) : std::nullopt;
      const auto from_string = v ? arguments_text(*v) : std::nullopt;
      arguments = text[p] == '{' ? compact_json(raw) : from_string ? *from_string : std::string(raw);
    }
    if (!end) break;
    p = skip_space(text, *end);
    if (p >= text.size() || text[p] != ',') break;
    ++p;
  }
  if (name) out.call = ToolCall{std::move(*name), std::move(arguments)};
  return out;
}

// Adds the cut call (if its name began) to `out`.
void add_cut(CutToolCalls& out, ObjectSoFar cut) {
  if (!cut.call) return;
  out.calls.push_back(std::move(*cut.call));
  out.name_cut = cut.name_cut;
  out.last_open = true;
}

// Call objects from text[pos], separated by `separator` (and space), until
// one is cut or something else comes. Returns false when a complete object
// is no call.
bool object_list(std::string_view text, size_t pos, char separator, CutToolCalls& out) {
  pos = skip_space(text, pos);
  while (pos < text.size() && text[pos] == '{') {
    const auto end = json_end(text, pos);
    if (!end) {
      add_cut(out, object_so_far(text, pos));
      return true;
    }
    auto call = call_at(text, pos, *end, kArgumentKeys);
    if (!call) return false;
    out.calls.push_back(std::move(*call));
    pos = skip_space(text, *end);
    if (pos < text.size() && text[pos] == separator) pos = skip_space(text, pos + 1);
  }
  return true;
}

CutToolCalls plain_cut(std::string_view text) { return {std::string(text), {}, false}; }

// A reply that is one JSON call (llama3 without its tag): a call object
// (its first key "name" or none yet), or plain content.
CutToolCalls whole_reply_call(std::string_view text, size_t pos) {
  CutToolCalls out;
  if (!json_end(text, pos)) {
    const ObjectSoFar first = object_so_far(text, pos);
    if (first.first_key && *first.first_key != "name") return plain_cut(text);
  }
  if (!object_list(text, pos, ';', out)) return plain_cut(text);
  return out;
}

}  // namespace

std::string cut_string(std::string_view text, size_t pos) {
  const std::string body(text.substr(pos));
  // At most a \uXXXX escape is cut: drop up to 6 bytes until it parses.
  for (size_t drop = 0; drop <= 6 && drop < body.size(); ++drop) {
    const Json j = Json::parse(body.substr(0, body.size() - drop) + "\"", nullptr, /*allow_exceptions=*/false);
    if (j.is_string()) return j.get<std::string>();
  }
  return "";
}

std::string_view without_partial_marker(std::string_view text, std::string_view marker) {
  const size_t at = marker_start(text, marker);
  return at == std::string_view::npos ? text : text.substr(0, at);
}

CutToolCalls cut_hermes(std::string_view text) {
  CutToolCalls out;
  size_t pos = 0;
  while (true) {
    const size_t open = text.find(kHermesOpen, pos);
    if (open == std::string_view::npos) {
      out.content.append(without_partial_marker(text.substr(pos), kHermesOpen));
      return out;
    }
    out.content.append(text.substr(pos, open - pos));
    const size_t start = skip_space(text, open + kHermesOpen.size());
    if (start >= text.size() || text[start] != '{') return out;  // cut before the object (or junk): markup
    const auto end = json_end(text, start);
    if (!end) {
      add_cut(out, object_so_far(text, start));
      return out;
    }
    if (auto call = call_at(text, start, *end, kArgumentKeys)) out.calls.push_back(std::move(*call));
    pos = skip_space(text, *end);
    const std::string_view rest = text.substr(pos);
    if (rest.size() < kHermesClose.size() && kHermesClose.substr(0, rest.size()) == rest) return out;  // cut closing
    if (rest.substr(0, kHermesClose.size()) == kHermesClose) pos += kHermesClose.size();
  }
}

CutToolCalls cut_mistral(std::string_view text) {
  const size_t marker = text.find(kMistralCalls);
  if (marker == std::string_view::npos) return plain_cut(without_partial_marker(text, kMistralCalls));
  CutToolCalls out{std::string(text.substr(0, marker)), {}, false};
  size_t p = skip_space(text, marker + kMistralCalls.size());
  if (p < text.size() && text[p] == '[') ++p;
  object_list(text, p, ',', out);
  return out;
}

CutToolCalls cut_llama3(std::string_view text) {
  const size_t tag = text.find(kPythonTag);
  if (tag != std::string_view::npos) {
    // After the tag only calls come (JSON, or a built-in tool's Python call).
    CutToolCalls out{std::string(text.substr(0, tag)), {}, false};
    object_list(text, tag + kPythonTag.size(), ';', out);
    return out;
  }
  const size_t start = skip_space(text, 0);
  if (start < text.size() && text[start] == '[') return cut_pythonic(text);
  if (start == text.size() || text[start] != '{') return plain_cut(without_partial_marker(text, kPythonTag));
  return whole_reply_call(text, start);
}

CutToolCalls cut_generic(std::string_view text) {
  const size_t start = skip_space(text, 0);
  if (start == text.size() || text[start] != '{') return plain_cut(text);
  // {"response": "text..."}, {"tool_calls": [...]}, {"tool_call": {...}}.
  size_t p = skip_space(text, start + 1);
  if (p >= text.size() || text[p] != '"') return {};  // only "{" so far: a reply not begun
  const auto key_end = string_end(text, p);
  if (!key_end) return {};
  const auto key = parse_json_at(text, p, *key_end);
  p = skip_space(text, *key_end);
  if (p < text.size() && text[p] == ':') p = skip_space(text, p + 1);
  if (key == Json("response")) {
    if (p >= text.size() || text[p] != '"') return {};
    const auto end = string_end(text, p);
    if (!end) return {cut_string(text, p), {}, false};
    const auto s = parse_json_at(text, p, *end);
    return {s && s->is_string() ? s->get<std::string>() : "", {}, false};
  }
  CutToolCalls out;
  if (key == Json("tool_calls")) {
    if (p < text.size() && text[p] == '[') ++p;
  } else if (key != Json("tool_call")) {
    return plain_cut(text);
  }
  if (!object_list(text, p, ',', out)) return plain_cut(text);
  return out;
}

}  // namespace kvlm::tool_calls
