#include "tokenizer/prompt_pieces.h"

#include "common/assert.h"
#include "tokenizer/tokenizer.h"

namespace kvlm {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

void append(std::vector<int32_t>& out, const std::vector<int32_t>& ids) { out.insert(out.end(), ids.begin(), ids.end()); }

}  // namespace

std::vector<ByteSpan> find_in_order(std::string_view text, std::span<const std::string> parts) {
  std::vector<ByteSpan> spans;
  size_t from = 0;
  for (const std::string& part : parts) {
    const std::string_view needle = trimmed(part);
    if (needle.empty()) continue;
    const size_t at = text.find(needle, from);
    if (at == std::string_view::npos) continue;
    spans.push_back({at, at + needle.size()});
    from = at + needle.size();
  }
  return spans;
}

std::vector<int32_t> encode_chunk(const Tokenizer& tok, std::string_view text) {
  return tok.encode(text, /*add_special=*/false, /*parse_special=*/true);
}

PieceIds encode_in_pieces(const Tokenizer& tok, std::string_view text, std::span<const ByteSpan> chunks,
                          const std::function<std::vector<int32_t>(std::string_view)>& encode_first) {
  PieceIds out;
  // With the space prefix a chunk's ids start with a space: one the text has
  // right before the chunk is the chunk's, not the piece's before it.
  const bool chunk_has_space = tok.vocab().add_space_prefix();
  size_t at = 0;  // where the next piece starts
  for (size_t i = 0; i < chunks.size(); ++i) {
    const ByteSpan c = chunks[i];
    KVLM_ASSERT(c.begin >= at && c.begin < c.end && c.end <= text.size(), "chunk spans must be ascending and inside");
    size_t end = c.begin;
    if (chunk_has_space && end > at && text[end - 1] == ' ') --end;
    const std::string_view before = text.substr(at, end - at);
    append(out.ids, i == 0 ? encode_first(before) : tok.encode_continuation(before, /*parse_special=*/true));
    const auto begin = static_cast<int32_t>(out.ids.size());
    append(out.ids, encode_chunk(tok, text.substr(c.begin, c.end - c.begin)));
    out.chunks.push_back({begin, static_cast<int32_t>(out.ids.size())});
    at = c.end;
  }
  const std::string_view rest = text.substr(at);
  if (chunks.empty()) {
    out.ids = encode_first(rest);
  } else if (!rest.empty()) {
    append(out.ids, tok.encode_continuation(rest, /*parse_special=*/true));
  }
  return out;
}

}  // namespace kvlm
