#include "router/chunk_scan.h"

#include <charconv>
#include <vector>

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

// Walks JSON text outside its strings: the nesting depth at its end relative
// to its start (nullopt if it closes more than it opened or ends inside a
// string), and in `keys` (if given) the keys met at depth 0, in order.
std::optional<int> nesting(std::string_view s, std::vector<std::string_view>* keys = nullptr) {
  int depth = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char ch = s[i];
    if (ch == '"') {
      const size_t begin = ++i;
      while (i < s.size() && s[i] != '"') i += s[i] == '\\' ? 2 : 1;
      if (i >= s.size()) return std::nullopt;
      size_t next = i + 1;
      while (next < s.size() && (s[next] == ' ' || s[next] == '\t' || s[next] == '\n' || s[next] == '\r')) ++next;
      if (keys && depth == 0 && next < s.size() && s[next] == ':') keys->push_back(s.substr(begin, i - begin));
    } else if (ch == '{' || ch == '[') {
      ++depth;
    } else if ((ch == '}' || ch == ']') && --depth < 0) {
      return std::nullopt;
    }
  }
  return depth;
}

// Whether the scan's reading is the one a JSON parser makes: `choices` is a
// key of the top-level object, and the choice's other members (`members`,
// after its index) stay inside it and repeat no key, `index` included (a
// parser keeps the last of repeated keys, the scan the first).
bool plain_layout(std::string_view d, size_t choices_at, std::string_view members) {
  if (nesting(d.substr(0, choices_at)) != 1) return false;
  std::vector<std::string_view> keys = {"index"};
  if (nesting(members, &keys) != 0) return false;
  for (size_t i = 1; i < keys.size(); ++i)
    for (size_t k = 0; k < i; ++k)
      if (keys[i] == keys[k]) return false;
  return true;
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
  const size_t members = static_cast<size_t>(after - d.data());
  if (!plain_layout(d, c, d.substr(members, fields_end - members))) return std::nullopt;
  // Only the choice's own key can be followed by a quote: a logprobs entry
  // keyed by a token spelled finish_reason holds a number.
  s.finished = d.substr(c, fields_end - c).find("\"finish_reason\":\"") != std::string_view::npos;
  s.without_ids.reserve(fields_end + kEnd.size());
  s.without_ids.append(d.substr(0, fields_end)).append(kEnd);
  return s;
}

}  // namespace kvlm::router
