#include "tokenizer/bpe.h"

#include <algorithm>

#include "common/error.h"
#include "tokenizer/unicode.h"
#include "tokenizer/word_cache.h"

namespace kvlm {

namespace {

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

uint64_t mix(uint64_t key) {
  key ^= key >> 33;
  key *= 0xFF51AFD7ED558CCDull;
  return key ^ (key >> 29);
}

std::string text_key(std::string_view left, std::string_view right) {
  return fmt::format("{}:{}{}", left.size(), left, right);
}

}  // namespace

BpeTokenizer::BpeTokenizer(const Vocab& vocab)
    : vocab_(vocab), pre_tokenizer_(vocab.pre_type().regexes) {
  const std::vector<std::string>& merges = vocab.merges();
  size_t capacity = 16;
  while (capacity < 2 * merges.size()) capacity *= 2;
  merges_by_id_.assign(capacity, MergeSlot{});
  merge_mask_ = capacity - 1;
  std::string joined;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& merge = merges[rank];
    // llama.cpp splits at the first space after the first byte, so a left
    // part may itself start with a space.
    const size_t space = merge.find(' ', 1);
    if (space == std::string::npos) continue;  // llama.cpp keeps ("", ""), which never matches
    const std::string_view left = std::string_view(merge).substr(0, space);
    const std::string_view right = std::string_view(merge).substr(space + 1);
    joined.assign(left);
    joined.append(right);
    const Merge value{static_cast<int32_t>(rank), vocab.find(joined).value_or(-1)};
    const std::optional<int32_t> left_id = vocab.find(left);
    const std::optional<int32_t> right_id = vocab.find(right);
    // emplace keeps the first (lowest) rank of a duplicate, as llama.cpp does.
    if (left_id && right_id) {
      insert_merge(pair_key(*left_id, *right_id), value);
    } else {
      merges_by_text_.emplace(text_key(left, right), value);
    }
  }
  for (int b = 0; b < 256; ++b) {
    byte_symbol_token_[b] = vocab.find(unicode::byte_to_utf8(static_cast<uint8_t>(b))).value_or(-1);
    raw_byte_token_[b] = vocab.find(std::string(1, static_cast<char>(b))).value_or(-1);
  }
}

void BpeTokenizer::insert_merge(uint64_t key, Merge merge) {
  for (uint64_t i = mix(key) & merge_mask_;; i = (i + 1) & merge_mask_) {
    MergeSlot& slot = merges_by_id_[i];
    if (slot.key == key) return;  // a duplicate keeps its first (lowest) rank
    if (slot.key == kEmptyKey) {
      slot = {key, merge};
      ++num_merges_by_id_;
      return;
    }
  }
}

const BpeTokenizer::Merge* BpeTokenizer::find_merge_by_id(uint64_t key) const {
  for (uint64_t i = mix(key) & merge_mask_;; i = (i + 1) & merge_mask_) {
    const MergeSlot& slot = merges_by_id_[i];
    if (slot.key == key) return &slot.merge;
    if (slot.key == kEmptyKey) return nullptr;
  }
}

const BpeTokenizer::Merge* BpeTokenizer::find_merge(int32_t left_id, int32_t right_id,
                                                    std::string_view left_text,
                                                    std::string_view right_text) const {
  if (left_id >= 0 && right_id >= 0) return find_merge_by_id(pair_key(left_id, right_id));
  if (merges_by_text_.empty()) return nullptr;
  auto it = merges_by_text_.find(text_key(left_text, right_text));
  return it == merges_by_text_.end() ? nullptr : &it->second;
}

namespace {

struct Symbol {
  int32_t prev;
  int32_t next;
  uint32_t begin;  // offset in the word's encoded text
  uint32_t size;   // encoded bytes; 0 once merged into its left neighbour
  int32_t id;      // token of the symbol's text, -1 if none
};

struct Bigram {
  int32_t rank;
  int32_t left;
  int32_t right;
  int32_t result;
  uint32_t size;  // encoded bytes of left + right when queued
};

// Lowest rank first; equal ranks: leftmost first (llm_bigram_bpe::comparator).
struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

}  // namespace

// Per-call buffers, reused across the words of one encode() call.
struct BpeTokenizer::Scratch {
  std::string encoded;
  std::vector<Symbol> symbols;
  std::vector<Bigram> heap;
};

void BpeTokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  // llama.cpp decodes to code points first (bad bytes become U+FFFD), so the
  // words are cut from that decoding when the text is not valid UTF-8.
  std::string normalized, regex_view;
  std::string_view words_text = text, match_text = text;
  if (unicode::normalize_like_llama(text, normalized, regex_view)) {
    words_text = normalized;
    match_text = regex_view;
  }
  std::vector<TextRange> words;
  pre_tokenizer_.split(match_text, words);
  Scratch scratch;
  WordCache cache;
  const auto encode_fn = [&](std::string_view word, std::vector<int32_t>& o) { encode_word(word, scratch, o); };
  for (const TextRange& w : words) cache.encode(words_text.substr(w.begin, w.size()), out, encode_fn);
}

void BpeTokenizer::encode_word(std::string_view word, Scratch& s, std::vector<int32_t>& out) const {
  // The word in GPT-2's byte-level alphabet: one code point (one symbol) per byte.
  s.encoded.clear();
  s.symbols.clear();
  for (size_t i = 0; i < word.size(); ++i) {
    const auto b = static_cast<uint8_t>(word[i]);
    const std::string& utf8 = unicode::byte_to_utf8(b);
    const auto index = static_cast<int32_t>(i);
    s.symbols.push_back({index - 1, i + 1 == word.size() ? -1 : index + 1,
                         static_cast<uint32_t>(s.encoded.size()), static_cast<uint32_t>(utf8.size()),
                         byte_symbol_token_[b]});
    s.encoded += utf8;
  }
  if (vocab_.ignore_merges()) {
    if (std::optional<int32_t> id = vocab_.find(s.encoded)) {
      out.push_back(*id);
      return;
    }
  }

  std::vector<Symbol>& sym = s.symbols;
  const std::string_view enc = s.encoded;
  // A binary heap kept in the scratch vector, so its buffer serves every word.
  std::vector<Bigram>& heap = s.heap;
  heap.clear();
  const auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = sym[left];
    const Symbol& r = sym[right];
    const Merge* merge = find_merge(l.id, r.id, enc.substr(l.begin, l.size), enc.substr(r.begin, r.size));
    if (merge == nullptr) return;
    heap.push_back({merge->rank, left, right, merge->result, l.size + r.size});
    std::push_heap(heap.begin(), heap.end(), BigramOrder{});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(sym.size()); ++i) try_add(i - 1, i);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), BigramOrder{});
    const Bigram bigram = heap.back();
    heap.pop_back();
    Symbol& left = sym[bigram.left];
    Symbol& right = sym[bigram.right];
    // Symbols only grow, so a changed size means the pair is stale.
    if (left.size == 0 || right.size == 0 || left.size + right.size != bigram.size) continue;
    left.size += right.size;
    left.id = bigram.result;
    right.size = 0;
    left.next = right.next;
    if (right.next >= 0) sym[right.next].prev = bigram.left;
    try_add(left.prev, bigram.left);
    try_add(bigram.left, left.next);
  }

  for (int32_t i = 0; i != -1; i = sym[i].next) {
    if (sym[i].id >= 0) {
      out.push_back(sym[i].id);
      continue;
    }
    // Not a token: llama.cpp looks each byte of the encoded text up as a
    // one-byte token and drops the ones that are not.
    for (char c : enc.substr(sym[i].begin, sym[i].size)) {
      const int32_t id = raw_byte_token_[static_cast<uint8_t>(c)];
      if (id >= 0) out.push_back(id);
    }
  }
}

}  // namespace kvlm
