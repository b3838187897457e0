#include "wire/openai/kv_chunks.h"

#include <optional>
#include <variant>

#include <fmt/format.h>

#include "tokenizer/tokenizer.h"
#include "wire/openai/fields.h"

namespace kvlm::openai {
namespace {

[[noreturn]] void bad_spans(const std::string& message) { invalid_field("kv_chunks", message, "invalid_value"); }

// Code point offsets into a UTF-8 text as byte offsets, asked in ascending
// order (one walk for all of a prompt's spans). A continuation byte
// (10xxxxxx) belongs to the code point before it, so ill-formed text has an
// answer too.
class CodePointWalk {
 public:
  explicit CodePointWalk(const std::string& text) : text_(text) {}
  // The byte where code point `n` starts (the text's size for n = its count);
  // nullopt past the end.
  std::optional<size_t> byte_of(size_t n) {
    while (num_points_ < n && byte_ < text_.size()) {
      ++byte_;
      while (byte_ < text_.size() && (static_cast<unsigned char>(text_[byte_]) & 0xC0) == 0x80) ++byte_;
      ++num_points_;
    }
    if (num_points_ < n) return std::nullopt;
    return byte_;
  }

 private:
  const std::string& text_;
  size_t byte_ = 0;
  size_t num_points_ = 0;
};

// The spans as given: [begin, end) pairs of integers, ascending, not
// overlapping, not empty.
std::vector<PromptSpan> read_pairs(const Json& list) {
  if (!list.is_array())
    bad_spans("'kv_chunks' must be a list of [begin, end] offsets into the prompt");
  std::vector<PromptSpan> spans;
  for (size_t i = 0; i < list.size(); ++i) {
    const Json& p = list[i];
    if (!p.is_array() || p.size() != 2 || !p[0].is_number_integer() || !p[1].is_number_integer() ||
        p[0].get<int64_t>() < 0 || p[1].get<int64_t>() < 0)
      bad_spans(fmt::format("'kv_chunks[{}]' must be [begin, end]: two offsets, integers >= 0", i));
    const auto begin = p[0].get<size_t>(), end = p[1].get<size_t>();
    if (begin >= end) bad_spans(fmt::format("'kv_chunks[{}]' is [{}, {}]: begin must be below end", i, begin, end));
    if (!spans.empty() && begin < spans.back().end)
      bad_spans(fmt::format("'kv_chunks[{}]' starts at {}, inside or before the chunk before it (which ends at {}): "
                            "chunks must be ascending and not overlap", i, begin, spans.back().end));
    spans.push_back({begin, end});
  }
  return spans;
}

}  // namespace

bool kv_chunk_mark(const Json& obj, const std::string& where) {
  const Json* mark = field(obj, "kv_chunk");
  if (!mark) return false;
  if (!mark->is_boolean())
    invalid_field(where + ".kv_chunk", fmt::format("'{}.kv_chunk' must be true or false", where), "invalid_type");
  return mark->get<bool>();
}

std::vector<PromptSpan> parse_kv_chunk_spans(const Json& body, const std::vector<Prompt>& prompts, bool has_suffix) {
  const Json* list = field(body, "kv_chunks");
  if (!list) return {};
  std::vector<PromptSpan> spans = read_pairs(*list);
  if (spans.empty()) return spans;
  if (prompts.size() != 1) bad_spans("'kv_chunks' marks spans of one prompt, not of a list of prompts");
  if (has_suffix) bad_spans("'kv_chunks' cannot be combined with 'suffix'");
  if (const auto* ids = std::get_if<std::vector<int32_t>>(&prompts[0])) {
    if (spans.back().end > ids->size())
      bad_spans(fmt::format("'kv_chunks' ends at token {}, past the prompt's {} tokens", spans.back().end, ids->size()));
    return spans;
  }
  const std::string& text = std::get<std::string>(prompts[0]);
  CodePointWalk walk(text);
  for (PromptSpan& s : spans) {
    const std::optional<size_t> begin = walk.byte_of(s.begin), end = walk.byte_of(s.end);
    if (!begin || !end) {
      size_t num_points = 0;
      for (char c : text) num_points += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
      bad_spans(fmt::format("'kv_chunks' ends at character {}, past the prompt's {} characters", spans.back().end,
                            num_points));
    }
    s = {*begin, *end};
  }
  return spans;
}

PieceIds completion_prompt_pieces(const Tokenizer& tok, const Prompt& prompt, std::span<const PromptSpan> chunks) {
  if (const auto* ids = std::get_if<std::vector<int32_t>>(&prompt)) {
    PieceIds out{*ids, {}};
    for (const PromptSpan& c : chunks) out.chunks.push_back({static_cast<int32_t>(c.begin), static_cast<int32_t>(c.end)});
    return out;
  }
  std::vector<ByteSpan> spans;
  for (const PromptSpan& c : chunks) spans.push_back({c.begin, c.end});
  return encode_in_pieces(tok, std::get<std::string>(prompt), spans, [&](std::string_view first) {
    return tok.encode(first, /*add_special=*/true, /*parse_special=*/true);
  });
}

}  // namespace kvlm::openai
