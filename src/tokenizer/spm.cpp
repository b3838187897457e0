#include "tokenizer/spm.h"

#include <algorithm>

#include "common/error.h"
#include "tokenizer/unicode.h"
#include "tokenizer/word_cache.h"

namespace kvlm {

namespace {
constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's escaped space
}  // namespace

SpmTokenizer::SpmTokenizer(const Vocab& vocab) : vocab_(vocab) {
  // Merged symbols are always tokens, so a merge can only join text across
  // "x" + U+2581 (x not U+2581) if some token contains that. Usually none
  // does (U+2581 only leads tokens), and then every U+2581 run that follows
  // other text starts an independent segment: same result, small heaps.
  words_are_independent_ = true;
  for (int32_t id = 0; id < vocab.size() && words_are_independent_; ++id) {
    const std::string& t = vocab.text(id);
    for (size_t k = t.find(kSpace, 1); k != std::string::npos; k = t.find(kSpace, k + 1)) {
      if (k < kSpace.size() || t.compare(k - kSpace.size(), kSpace.size(), kSpace) != 0) {
        words_are_independent_ = false;
        break;
      }
    }
  }
  for (int b = 0; b < 256; ++b) {
    // llama.cpp's byte_to_token: "<0xNN>" first, then the byte itself as text.
    std::optional<int32_t> id = vocab.find(fmt::format("<0x{:02X}>", b));
    if (!id) id = vocab.find(std::string(1, static_cast<char>(b)));
    byte_tokens_[b] = id.value_or(-1);
  }
}

void SpmTokenizer::append_bytes(std::string_view bytes, std::vector<int32_t>& out) const {
  for (char c : bytes) {
    const int32_t id = byte_tokens_[static_cast<uint8_t>(c)];
    if (id >= 0) {
      out.push_back(id);
    } else if (vocab_.special().unk) {
      // llama.cpp throws here (std::out_of_range); the unknown token keeps a
      // request alive on vocabularies without byte fallback.
      out.push_back(*vocab_.special().unk);
    } else {
      throw_error(ErrorCode::kUnsupported, "vocabulary has no token for byte 0x{:02X} and no unknown token",
                  static_cast<uint8_t>(c));
    }
  }
}

namespace {

struct Symbol {
  int32_t prev;
  int32_t next;
  uint32_t begin;  // byte offset in the text
  uint32_t size;   // bytes; 0 once merged into its left neighbour
};

struct Bigram {
  float score;
  int32_t left;
  int32_t right;
  uint32_t size;  // bytes of left + right when the pair was queued
};

// Highest score first; equal scores: leftmost first (llm_bigram_spm::comparator).
struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

struct SpmTokenizer::Scratch {
  std::vector<Symbol> symbols;
  std::vector<Bigram> heap;
};

void SpmTokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  if (text.size() > UINT32_MAX) throw_error(ErrorCode::kOutOfRange, "text of {} bytes is too long to tokenize", text.size());
  Scratch scratch;
  const auto encode_fn = [&](std::string_view segment, std::vector<int32_t>& o) { merge(segment, scratch, o); };
  if (!words_are_independent_) {
    merge(text, scratch, out);
    return;
  }
  // Cut before every U+2581 run that follows other text, walking characters
  // with the same lead-byte rule as merge() so cuts fall between symbols.
  WordCache cache;
  size_t segment_begin = 0;
  bool prev_is_space = false;
  for (size_t offset = 0; offset < text.size();) {
    const size_t size = std::min(unicode::lead_byte_length(static_cast<uint8_t>(text[offset])), text.size() - offset);
    const bool is_space = text.substr(offset, size) == kSpace;
    if (is_space && !prev_is_space && offset > 0) {
      cache.encode(text.substr(segment_begin, offset - segment_begin), out, encode_fn);
      segment_begin = offset;
    }
    prev_is_space = is_space;
    offset += size;
  }
  cache.encode(text.substr(segment_begin), out, encode_fn);
}

void SpmTokenizer::merge(std::string_view text, Scratch& scratch, std::vector<int32_t>& out) const {
  std::vector<Symbol>& symbols = scratch.symbols;
  symbols.clear();
  for (size_t offset = 0; offset < text.size();) {
    const size_t size = std::min(unicode::lead_byte_length(static_cast<uint8_t>(text[offset])), text.size() - offset);
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({index - 1, offset + size == text.size() ? -1 : index + 1, static_cast<uint32_t>(offset),
                       static_cast<uint32_t>(size)});
    offset += size;
  }

  std::vector<Bigram>& heap = scratch.heap;
  heap.clear();
  const size_t max_len = vocab_.max_token_length();
  const auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const uint32_t size = symbols[left].size + symbols[right].size;
    if (size > max_len) return;  // no token is that long
    const std::optional<int32_t> id = vocab_.find(text.substr(symbols[left].begin, size));
    if (!id) return;
    heap.push_back({vocab_.score(*id), left, right, size});
    std::push_heap(heap.begin(), heap.end(), BigramOrder{});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) try_add(i - 1, i);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), BigramOrder{});
    const Bigram bigram = heap.back();
    heap.pop_back();
    Symbol& left = symbols[bigram.left];
    Symbol& right = symbols[bigram.right];
    // Symbols only grow, so a changed size means the pair is stale.
    if (left.size == 0 || right.size == 0 || left.size + right.size != bigram.size) continue;
    left.size += right.size;
    right.size = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;
    try_add(left.prev, bigram.left);
    try_add(bigram.left, left.next);
  }

  // Every merged symbol is a token; a symbol that is not is a single
  // character the vocabulary lacks and falls back to its bytes.
  for (int32_t i = 0; i != -1; i = symbols[i].next) {
    const std::string_view piece = text.substr(symbols[i].begin, symbols[i].size);
    if (std::optional<int32_t> id = vocab_.find(piece)) {
      out.push_back(*id);
    } else {
      append_bytes(piece, out);
    }
  }
}

}  // namespace kvlm
