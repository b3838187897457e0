// The fast merge loops (heaps, per-word segments, word cache, id-keyed merge
// table) against the plain definitions: repeatedly merge the best adjacent
// pair (SentencePiece: highest token score; BPE: lowest merge rank; ties:
// leftmost), rescanning everything after each merge. Quadratic, so the texts
// are a few kilobytes.
#include <gtest/gtest.h>

#include <unordered_map>

#include <fmt/format.h>

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer_test_util.h"

namespace kvlm {
namespace {

std::string sample_text() {
  std::string text = test::read_file(test::shared_path("text/tinystories_sample.txt")).substr(0, 3000);
  text += test::read_file(test::shared_path("vocab/ggml-vocab-gpt-2.gguf.inp"));
  text += "  spaces   and\ttabs\u00a0nbsp ▁pre▁escaped ~~x 🦙🦙 \xff bad bytes";
  return text;
}

// SentencePiece by definition, over the whole text at once.
std::vector<int32_t> naive_spm(const Vocab& vocab, std::string_view raw) {
  std::string text = "\xE2\x96\x81";
  for (char c : raw) text += c == ' ' ? std::string("\xE2\x96\x81") : std::string(1, c);
  std::vector<std::string> symbols;
  for (size_t pos = 0; pos < text.size();) {
    const size_t n = std::min(unicode::lead_byte_length(static_cast<uint8_t>(text[pos])), text.size() - pos);
    symbols.push_back(text.substr(pos, n));
    pos += n;
  }
  while (true) {
    int best = -1;
    float best_score = 0;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      const auto id = vocab.find(symbols[i] + symbols[i + 1]);
      if (id && (best < 0 || vocab.score(*id) > best_score)) {
        best = static_cast<int>(i);
        best_score = vocab.score(*id);
      }
    }
    if (best < 0) break;
    symbols[best] += symbols[best + 1];
    symbols.erase(symbols.begin() + best + 1);
  }
  std::vector<int32_t> ids;
  for (const std::string& s : symbols) {
    if (auto id = vocab.find(s)) {
      ids.push_back(*id);
    } else {
      for (char c : s) ids.push_back(*vocab.find(fmt::format("<0x{:02X}>", static_cast<uint8_t>(c))));
    }
  }
  return ids;
}

// Byte-level BPE by definition, word by word (words from the pre-tokenizer).
std::vector<int32_t> naive_bpe(const Vocab& vocab, const std::string& text) {
  std::unordered_map<std::string, int> ranks;
  for (size_t r = 0; r < vocab.merges().size(); ++r) ranks.emplace(vocab.merges()[r], static_cast<int>(r));
  std::string normalized, view;
  const bool changed = unicode::normalize_like_llama(text, normalized, view);
  const std::string& words_text = changed ? normalized : text;
  PreTokenizer pre(vocab.pre_type().regexes);
  std::vector<TextRange> words;
  pre.split(changed ? view : text, words);
  std::vector<int32_t> ids;
  for (const TextRange& w : words) {
    std::vector<std::string> symbols;
    for (size_t i = w.begin; i < w.end; ++i) symbols.push_back(unicode::byte_to_utf8(static_cast<uint8_t>(words_text[i])));
    while (true) {
      int best = -1, best_rank = 0;
      for (size_t i = 0; i + 1 < symbols.size(); ++i) {
        auto it = ranks.find(symbols[i] + " " + symbols[i + 1]);
        if (it != ranks.end() && (best < 0 || it->second < best_rank)) {
          best = static_cast<int>(i);
          best_rank = it->second;
        }
      }
      if (best < 0) break;
      symbols[best] += symbols[best + 1];
      symbols.erase(symbols.begin() + best + 1);
    }
    for (const std::string& s : symbols) ids.push_back(vocab.find(s).value());
  }
  return ids;
}

TEST(ReferenceMerge, SentencePieceMatchesDefinition) {
  const std::string text = sample_text();
  for (const char* rel : {"vocab/ggml-vocab-llama-spm.gguf", "models/stories260K.gguf"}) {
    const Tokenizer& tok = test::shared_tokenizer(rel);
    EXPECT_EQ(tok.encode(text, false, false), naive_spm(tok.vocab(), text)) << rel;
  }
}

TEST(ReferenceMerge, BytePairMatchesDefinition) {
  const std::string text = sample_text();
  for (const char* rel : {"vocab/ggml-vocab-gpt-2.gguf", "vocab/ggml-vocab-starcoder.gguf"}) {
    const Tokenizer& tok = test::shared_tokenizer(rel);
    EXPECT_EQ(tok.encode(text, false, false), naive_bpe(tok.vocab(), text)) << rel;
  }
}

}  // namespace
}  // namespace kvlm
