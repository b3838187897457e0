#include "router/chunk_scan.h"

#include <charconv>

namespace kvlm::router {
namespace {

constexpr std::string_view kChoices = "\"choices\":[{\"index\":";
constexpr std::string_view kIds = ",\"token_ids\":[";
constexpr std::string_view kPromptIds = ",\"prompt_token_ids\":[";
constexpr std::string_view kEnd = "}]}";

// The integers of a JSON array's body "1,2,3" (nullopt for anything else).
std::optional<std::vector<int32_t>> int_list(std::string_view s) {
  std::vector<int32_t> out;
  const char* p = s.data();
  const char* end = p + s.size();
  while (p < end) {
    int32_t v = 0;
    const auto [next, ec] = std::from_chars(p, end, v);
    if (ec != std::errc()) return std::nullopt;
    out.push_back(v);
    p = next;
    if (p < end && *p++ != ',') return std::nullopt;
  }
  return out;
}

// The array field `key` ending at `end` (just before "}]}" or the next
// field): its values and where the field starts; nullopt if absent.
std::optional<std::pair<size_t, std::vector<int32_t>>> array_field(std::string_view d, std::string_view key,
                                                                   size_t end) {
  if (end == 0 || d[end - 1] != ']') return std::nullopt;
  const size_t at = d.rfind(key, end);
  if (at == std::string_view::npos) return std::nullopt;
  const size_t body = at + key.size();
  if (body > end - 1 || d.substr(body, end - 1 - body).find(']') != std::string_view::npos) return std::nullopt;
  auto values = int_list(d.substr(body, end - 1 - body));
  if (!values) return std::nullopt;
  return std::pair{at, std::move(*values)};
}

}  // namespace

std::optional<ScannedChunk> scan_chunk(std::string_view d) {
  const size_t c = d.find(kChoices);
  if (c == std::string_view::npos || d.size() < kEnd.size() || d.substr(d.size() - kEnd.size()) != kEnd)
    return std::nullopt;
  ScannedChunk s;
  const char* p = d.data() + c + kChoices.size();
  const auto [after, ec] = std::from_chars(p, d.data() + d.size(), s.index);
  if (ec != std::errc() || *after != ',') return std::nullopt;
  size_t fields_end = d.size() - kEnd.size();  // where the choice's own fields end
  // A key never occurs inside a string: one that is there but not where and
  // as expected is another layout.
  if (auto ids = array_field(d, kIds, fields_end)) {
    s.has_ids = true;
    s.ids = std::move(ids->second);
    fields_end = ids->first;
    if (auto prompt = array_field(d, kPromptIds, fields_end)) {
      s.prompt_ids = std::move(prompt->second);
      fields_end = prompt->first;
    }
  }
  if (d.substr(0, fields_end).find(kPromptIds) != std::string_view::npos ||
      d.substr(0, fields_end).find(kIds) != std::string_view::npos)
    return std::nullopt;
  // Only the choice's own key can be followed by a quote: a logprobs entry
  // keyed by a token spelled finish_reason holds a number.
  s.finished = d.substr(c, fields_end - c).find("\"finish_reason\":\"") != std::string_view::npos;
  s.without_ids.reserve(fields_end + kEnd.size());
  s.without_ids.append(d.substr(0, fields_end)).append(kEnd);
  return s;
}

}  // namespace kvlm::router
