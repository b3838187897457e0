// A prompt tokenized in pieces, so that marked spans of it (KV chunks,
// docs/kv-chunks.md) have token ids of their own: a chunk's ids are always
// the standalone tokenization of its text, whatever stands around it, which
// is what lets the engine reuse its KV at any position.
//
//   text:   [ before ][ chunk 0 ][ between ][ chunk 1 ][ after ]
//   ids:    encode_first(before) + encode_chunk(chunk 0)
//           + encode_continuation(between) + encode_chunk(chunk 1) + ...
//
// A prompt without chunks is encode_first(text): the caller's own
// tokenization, bit for bit. With SentencePiece's space prefix
// (add_space_prefix), a chunk's ids begin with that prefix's space; a
// single space right before the chunk in the text is left to it, so the ids
// still read as the text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvlm {

class Tokenizer;

// [begin, end) in bytes of a text.
struct ByteSpan {
  size_t begin = 0;
  size_t end = 0;
  bool operator==(const ByteSpan&) const = default;
};

// [begin, end) in token ids.
struct IdSpan {
  int32_t begin = 0;
  int32_t end = 0;
  bool operator==(const IdSpan&) const = default;
};

// Where each of `parts` stands in `text`: each is searched for from the end
// of the one found before it, with its leading and trailing whitespace left
// out (chat templates trim what they render). A part that is only
// whitespace, or is not found, is left out: the result is ascending and not
// overlapping, and may be shorter than `parts`.
std::vector<ByteSpan> find_in_order(std::string_view text, std::span<const std::string> parts);

// A chunk's ids: its text alone, special pieces parsed, no BOS/EOS. The same
// in every prompt.
std::vector<int32_t> encode_chunk(const Tokenizer& tok, std::string_view text);

struct PieceIds {
  std::vector<int32_t> ids;
  std::vector<IdSpan> chunks;  // one per chunk span given, over `ids`
};
// `text` tokenized in pieces cut at `chunks` (ascending, not overlapping,
// not empty, inside `text`; asserted): the text before the first chunk by
// `encode_first` (the caller's tokenization of a whole prompt: BOS, special
// pieces), each chunk by encode_chunk, the text between and after them by
// Tokenizer::encode_continuation with special pieces parsed.
PieceIds encode_in_pieces(const Tokenizer& tok, std::string_view text, std::span<const ByteSpan> chunks,
                          const std::function<std::vector<int32_t>(std::string_view)>& encode_first);

}  // namespace kvlm
