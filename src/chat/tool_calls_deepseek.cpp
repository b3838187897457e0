// DeepSeek-R1 (and its Qwen/Llama distills): after the reasoning and any
// text, a block of calls in the model's own tokens, the arguments in a json
// code fence:
//   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather
//   ```json
//   {"city": "Paris"}
//   ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>
// The distills often drop the outer begin token; a missing calls-end at the
// end of the output is taken too.
#include "chat/tool_calls_impl.h"

namespace kvlm::tool_calls {
namespace {

// One call from text[pos] (just past <｜tool▁call▁begin｜>); the offset after
// its end token, or nullopt.
std::optional<size_t> parse_one(std::string_view text, size_t pos, std::vector<ToolCall>& calls) {
  const size_t sep = text.find(kDeepSeekSep, pos);
  if (sep == std::string_view::npos) return std::nullopt;
  size_t name_start = sep + kDeepSeekSep.size();
  const size_t name_end = text.find_first_of("\n`{", name_start);
  if (name_end == std::string_view::npos) return std::nullopt;
  std::string name(text.substr(name_start, name_end - name_start));
  while (!name.empty() && (name.back() == ' ' || name.back() == '\r')) name.pop_back();
  if (name.empty()) return std::nullopt;
  size_t p = skip_space(text, name_end);
  const bool fenced = text.substr(p, 3) == "```";
  if (fenced) {
    p += 3;
    if (text.substr(p, 4) == "json") p += 4;
    p = skip_space(text, p);
  }
  const size_t args_start = p;
  const auto end = json_end(text, p);
  if (!end) return std::nullopt;
  const auto args = parse_json_at(text, p, *end);
  if (!args || !args->is_object()) return std::nullopt;
  p = skip_space(text, *end);
  if (fenced) {
    if (text.substr(p, 3) != "```") return std::nullopt;
    p = skip_space(text, p + 3);
  }
  if (text.substr(p, kDeepSeekCallEnd.size()) != kDeepSeekCallEnd) return std::nullopt;
  calls.push_back({std::move(name), compact_json(text.substr(args_start, *end - args_start))});
  return p + kDeepSeekCallEnd.size();
}

}  // namespace

ParsedToolCalls parse_deepseek(std::string_view text) {
  const size_t block = text.find(kDeepSeekCallsBegin);
  const size_t first_call = text.find(kDeepSeekCallBegin);
  const size_t start = std::min(block, first_call);
  if (start == std::string_view::npos) return plain(text);
  ParsedToolCalls out{std::string(text.substr(0, start)), {}};
  size_t pos = start == block ? block + kDeepSeekCallsBegin.size() : start;
  while (true) {
    pos = skip_space(text, pos);
    if (text.substr(pos, kDeepSeekCallBegin.size()) != kDeepSeekCallBegin) break;
    const auto next = parse_one(text, pos + kDeepSeekCallBegin.size(), out.calls);
    if (!next) return plain(text);
    pos = *next;
  }
  if (out.calls.empty()) return plain(text);
  if (text.substr(pos, kDeepSeekCallsEnd.size()) == kDeepSeekCallsEnd) pos += kDeepSeekCallsEnd.size();
  if (!only_space(text, pos)) return plain(text);
  return out;
}

namespace {

// The call cut at text[pos] (just past <｜tool▁call▁begin｜>): its name so far
// and its arguments' text so far (after the json fence).
void add_cut_call(std::string_view text, size_t pos, CutToolCalls& out) {
  const size_t sep = text.find(kDeepSeekSep, pos);
  if (sep == std::string_view::npos) return;  // the name has not begun
  const size_t name_start = sep + kDeepSeekSep.size();
  const size_t name_end = text.find_first_of("\n`{", name_start);
  std::string name(text.substr(name_start, name_end == std::string_view::npos ? std::string_view::npos
                                                                               : name_end - name_start));
  while (!name.empty() && (name.back() == ' ' || name.back() == '\r')) name.pop_back();
  if (name.empty()) return;
  std::string arguments;
  if (name_end != std::string_view::npos) {
    size_t p = skip_space(text, name_end);
    if (text.substr(p, 3) == "```") p = skip_space(text, text.substr(p + 3, 4) == "json" ? p + 7 : p + 3);
    // The object so far, or whole (the fence after it is markup).
    if (p < text.size() && text[p] == '{') {
      const auto end = json_end(text, p);
      arguments = compact_json(text.substr(p, end ? *end - p : std::string_view::npos));
    }
  }
  out.calls.push_back({std::move(name), std::move(arguments)});
  out.name_cut = name_end == std::string_view::npos;
  out.last_open = true;
}

}  // namespace

CutToolCalls cut_deepseek(std::string_view text) {
  const size_t block = text.find(kDeepSeekCallsBegin);
  const size_t first_call = text.find(kDeepSeekCallBegin);
  const size_t start = std::min(block, first_call);
  if (start == std::string_view::npos) {
    // A marker begun at the very end is markup being written.
    const std::string_view content = without_partial_marker(text, kDeepSeekCallsBegin);
    return {std::string(without_partial_marker(content, kDeepSeekCallBegin)), {}, false};
  }
  CutToolCalls out{std::string(text.substr(0, start)), {}, false};
  size_t pos = start == block ? block + kDeepSeekCallsBegin.size() : start;
  while (true) {
    pos = skip_space(text, pos);
    if (text.substr(pos, kDeepSeekCallBegin.size()) != kDeepSeekCallBegin) return out;
    const size_t body = pos + kDeepSeekCallBegin.size();
    const auto next = parse_one(text, body, out.calls);
    if (!next) {
      add_cut_call(text, body, out);
      return out;
    }
    pos = *next;
  }
}

}  // namespace kvlm::tool_calls
