// Tokenizer behaviour beyond the vocab vectors: the stories260K goldens,
// special-token parsing, end-of-generation sets, detokenizing, errors.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "tokenizer/unicode.h"
#include "tokenizer_test_util.h"

namespace kvlm {
namespace {

constexpr const char* kStories = "models/stories260K.gguf";
constexpr const char* kLlamaSpm = "vocab/ggml-vocab-llama-spm.gguf";
constexpr const char* kPhi3 = "vocab/ggml-vocab-phi-3.gguf";
constexpr const char* kGpt2 = "vocab/ggml-vocab-gpt-2.gguf";

std::vector<nlohmann::json> golden_lines() {
  std::ifstream in(test::shared_path("golden/stories260K-greedy.jsonl"));
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
  }
  return lines;
}

TEST(Stories260K, Vocabulary) {
  const Tokenizer& tok = test::shared_tokenizer(kStories);
  EXPECT_EQ(tok.vocab_size(), 512);
  EXPECT_EQ(tok.vocab().model(), TokenizerModel::kSpm);
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_TRUE(tok.add_bos());
  EXPECT_FALSE(tok.add_eos());
  EXPECT_TRUE(tok.vocab().add_space_prefix());
  EXPECT_EQ(tok.vocab().eog_ids(), std::vector<int32_t>{2});
  EXPECT_TRUE(tok.is_end_of_generation(2));
  EXPECT_FALSE(tok.is_end_of_generation(1));
  EXPECT_TRUE(tok.is_control(1));
  EXPECT_FALSE(tok.is_control(403));
  // The file's 0xFFFFFFFF separator/padding ids mean "none".
  EXPECT_FALSE(tok.vocab().special().sep.has_value());
  EXPECT_FALSE(tok.vocab().special().pad.has_value());
}

TEST(Stories260K, OnceUponATime) {
  const Tokenizer& tok = test::shared_tokenizer(kStories);
  EXPECT_EQ(tok.encode("Once upon a time", true, true), (std::vector<int32_t>{1, 403, 407, 261, 378}));
  EXPECT_EQ(tok.encode("Once upon a time", false, false), (std::vector<int32_t>{403, 407, 261, 378}));
}

TEST(Stories260K, GoldenPromptTokens) {
  const Tokenizer& tok = test::shared_tokenizer(kStories);
  const auto lines = golden_lines();
  ASSERT_EQ(lines.size(), 5u);
  for (const auto& g : lines) {
    const auto expected = g.at("prompt_tokens").get<std::vector<int32_t>>();
    EXPECT_EQ(tok.encode(g.at("prompt").get<std::string>(), true, true), expected) << g.at("prompt");
  }
}

// The generated steps stream to exactly the golden pieces and text (no
// space is stripped from a continuation).
TEST(Stories260K, GoldenPiecesAndStreamedText) {
  const Tokenizer& tok = test::shared_tokenizer(kStories);
  for (const auto& g : golden_lines()) {
    StreamingDetokenizer stream(tok);
    std::string text;
    for (const auto& step : g.at("steps")) {
      const int32_t id = step.at("token").get<int32_t>();
      EXPECT_EQ(tok.token_to_piece(id), step.at("piece").get<std::string>());
      text += stream.push(id);
    }
    text += stream.flush();
    EXPECT_EQ(text, g.at("text").get<std::string>());
  }
}

TEST(Stories260K, LeadingSpaceAfterBos) {
  const Tokenizer& tok = test::shared_tokenizer(kStories);
  const std::vector<int32_t> ids = tok.encode("Once upon a time", true, true);
  const auto stream_all = [&](StreamOptions options) {
    StreamingDetokenizer stream(tok, options);
    std::string text;
    for (int32_t id : ids) text += stream.push(id);
    return text + stream.flush();
  };
  EXPECT_EQ(stream_all({}), " Once upon a time");
  EXPECT_EQ(stream_all({.render_special = false, .strip_leading_space = true}), "Once upon a time");
  EXPECT_EQ(stream_all({.render_special = true, .strip_leading_space = true}), "<s>Once upon a time");
  // llama.cpp's detokenize: without BOS the first piece loses its space; a
  // removed BOS leaves the next piece's space in place.
  EXPECT_EQ(tok.decode(std::span(ids).subspan(1)), "Once upon a time");
  EXPECT_EQ(tok.decode(ids), "<s> Once upon a time");
  EXPECT_EQ(tok.decode(ids, {.remove_special = true}), " Once upon a time");
  EXPECT_EQ(tok.decode(ids, {.remove_special = false, .render_special = false}), " Once upon a time");
}

TEST(Tokenizer, EmptyText) {
  const Tokenizer& spm = test::shared_tokenizer(kLlamaSpm);
  EXPECT_EQ(spm.encode("", true, true), std::vector<int32_t>{1});
  EXPECT_TRUE(spm.encode("", false, false).empty());
  const Tokenizer& bpe = test::shared_tokenizer(kGpt2);
  EXPECT_TRUE(bpe.encode("", true, true).empty());  // GPT-2 adds no BOS
  EXPECT_EQ(bpe.decode({}), "");
}

TEST(SpecialTokens, LlamaSpmBos) {
  const Tokenizer& tok = test::shared_tokenizer(kLlamaSpm);
  // Parsed: <s> is BOS and the text after it gets the space prefix.
  EXPECT_EQ(tok.encode("<s>Hello", false, true), (std::vector<int32_t>{1, 15043}));
  EXPECT_EQ(tok.encode("<s>Hello", true, true), (std::vector<int32_t>{1, 1, 15043}));
  // Not parsed: plain text.
  const std::vector<int32_t> plain = tok.encode("<s>Hello", false, false);
  EXPECT_EQ(plain, (std::vector<int32_t>{529, 29879, 29958, 10994}));
  EXPECT_EQ(tok.decode(plain), "<s>Hello");
  EXPECT_EQ(tok.encode("Hello</s>", false, true), (std::vector<int32_t>{15043, 2}));
}

TEST(SpecialTokens, Gpt2EndOfText) {
  const Tokenizer& tok = test::shared_tokenizer(kGpt2);
  EXPECT_EQ(tok.encode("a<|endoftext|>b", false, true), (std::vector<int32_t>{64, 50256, 65}));
  const std::vector<int32_t> plain = tok.encode("a<|endoftext|>b", false, false);
  EXPECT_EQ(plain, (std::vector<int32_t>{64, 27, 91, 437, 1659, 5239, 91, 29, 65}));
  EXPECT_EQ(tok.decode(plain), "a<|endoftext|>b");
  EXPECT_TRUE(tok.is_end_of_generation(50256));
  EXPECT_EQ(tok.vocab().eog_ids(), std::vector<int32_t>{50256});
}

// Phi-3: llama.cpp gives its special tokens RSTRIP, so the newline after
// <|user|> and <|end|> is swallowed; text after a special token gets the
// SentencePiece space prefix.
TEST(SpecialTokens, Phi3ChatRstrip) {
  const Tokenizer& tok = test::shared_tokenizer(kPhi3);
  EXPECT_EQ(tok.encode("<|user|>\nHello<|end|>\n<|assistant|>", true, true),
            (std::vector<int32_t>{1, 32010, 15043, 32007, 32001}));
  EXPECT_EQ(tok.vocab().eog_ids(), (std::vector<int32_t>{2, 32000, 32007}));
  EXPECT_TRUE(tok.is_control(2));  // </s> is user-defined in the file, control as an end of generation
}

// Longest special token first: "<|end|>" inside "<|endoftext|>" is not split.
TEST(SpecialTokens, LongestMatchFirst) {
  const Tokenizer& tok = test::shared_tokenizer(kPhi3);
  EXPECT_EQ(tok.encode("<|endoftext|><|end|>", false, true), (std::vector<int32_t>{32000, 32007}));
}

// User-defined tokens are split out even with parse_special off (llama.cpp;
// here deepseek-coder's single-character added tokens such as "ü").
TEST(SpecialTokens, UserDefinedAlwaysSplit) {
  const Tokenizer& tok = test::shared_tokenizer("vocab/ggml-vocab-deepseek-coder.gguf");
  EXPECT_EQ(tok.encode("Führer", false, false), (std::vector<int32_t>{37, 32009, 71, 6247}));
}

TEST(Streaming, ByteFallbackNeverSplitsACharacter) {
  const Tokenizer& tok = test::shared_tokenizer(kLlamaSpm);
  const std::string text = "🦙 and 😁 ok";
  const std::vector<int32_t> ids = tok.encode(text, false, false);
  StreamingDetokenizer stream(tok, {.render_special = false, .strip_leading_space = true});
  std::vector<std::string> chunks;
  for (int32_t id : ids) chunks.push_back(stream.push(id));
  chunks.push_back(stream.flush());
  std::string joined;
  size_t num_empty = 0;
  for (const std::string& c : chunks) {
    EXPECT_TRUE(unicode::is_valid_utf8(c));
    num_empty += c.empty();
    joined += c;
  }
  EXPECT_EQ(joined, text);
  EXPECT_EQ(joined, tok.decode(ids));
  EXPECT_GE(num_empty, 3u);  // 🦙 comes as four <0xNN> tokens: three pushes wait
}

TEST(Streaming, InvalidBytesBecomeReplacementCharacters) {
  const Tokenizer& tok = test::shared_tokenizer(kLlamaSpm);
  const int32_t f0 = tok.vocab().find("<0xF0>").value();
  const int32_t e2 = tok.vocab().find("<0xE2>").value();
  const int32_t a = tok.vocab().find("<0x41>").value();
  StreamingDetokenizer stream(tok);
  EXPECT_EQ(stream.push(f0), "");
  EXPECT_EQ(stream.push(a), "\xEF\xBF\xBD" "A");
  EXPECT_EQ(stream.push(e2), "");
  EXPECT_EQ(stream.flush(), "\xEF\xBF\xBD");
  EXPECT_THROW(stream.push(tok.vocab_size()), Error);
}

TEST(Streaming, ByteLevelBpe) {
  const Tokenizer& tok = test::shared_tokenizer(kGpt2);
  const std::string text = "naïve 🚀 😶\u200d🌫️ 我想在apple工作";
  const std::vector<int32_t> ids = tok.encode(text, false, false);
  StreamingDetokenizer stream(tok);
  std::string joined;
  for (int32_t id : ids) {
    const std::string chunk = stream.push(id);
    EXPECT_TRUE(unicode::is_valid_utf8(chunk));
    joined += chunk;
  }
  joined += stream.flush();
  EXPECT_EQ(joined, text);
}

TEST(Tokenizer, InvalidUtf8) {
  // Byte-level BPE sees llama.cpp's decoding: each bad byte is U+FFFD.
  const Tokenizer& bpe = test::shared_tokenizer(kGpt2);
  EXPECT_EQ(bpe.decode(bpe.encode("\xff" "abc\xc3", false, false)), "\xEF\xBF\xBD" "abc\xEF\xBF\xBD");
  // SentencePiece falls back to the raw bytes.
  const Tokenizer& spm = test::shared_tokenizer(kLlamaSpm);
  EXPECT_EQ(spm.decode(spm.encode("a\xff" "b", false, false)), "a\xff" "b");
}

TEST(Tokenizer, PiecesAndIds) {
  const Tokenizer& spm = test::shared_tokenizer(kLlamaSpm);
  EXPECT_EQ(spm.token_to_piece(15043), " Hello");
  EXPECT_EQ(spm.token_to_piece(13), "\n");  // <0x0A>
  EXPECT_EQ(spm.token_to_piece(1), "<s>");
  const Tokenizer& bpe = test::shared_tokenizer(kGpt2);
  EXPECT_EQ(bpe.token_to_piece(18435), " Hello");
  EXPECT_EQ(bpe.token_to_piece(198), "\n");
  EXPECT_THROW(bpe.token_to_piece(-1), Error);
  EXPECT_THROW(bpe.token_to_piece(bpe.vocab_size()), Error);
}

// A long word without spaces (one SentencePiece symbol run, one BPE word) is
// merged in O(n log n): this would take minutes with a quadratic merge loop.
TEST(Tokenizer, LongWord) {
  std::string word;
  for (int i = 0; i < 20000; ++i) word += "abcdefghij"[i % 10];
  for (const char* rel : {kLlamaSpm, kGpt2}) {
    const Tokenizer& tok = test::shared_tokenizer(rel);
    const std::vector<int32_t> ids = tok.encode(word, false, false);
    EXPECT_LT(ids.size(), word.size() / 2) << rel;
    EXPECT_EQ(tok.decode(ids), word) << rel;
  }
}

Metadata copy_with(const Metadata& m, const std::string& key, const std::string& value) {
  Metadata out = m;
  MetaValue v;
  v.type = MetaType::kString;
  v.value = value;
  out.set(key, v);
  return out;
}

TEST(TokenizerErrors, UnsupportedModelTypeIsNamed) {
  auto gguf = GgufFile::open(test::shared_path(kLlamaSpm));
  for (const std::string model : {"bert", "t5", "rwkv"}) {
    try {
      Tokenizer::from_metadata(copy_with(gguf->metadata(), "tokenizer.ggml.model", model));
      ADD_FAILURE() << model << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
      EXPECT_NE(std::string(e.what()).find("'" + model + "'"), std::string::npos) << e.what();
    }
  }
}

TEST(TokenizerErrors, MissingVocabularyIsCorrupt) {
  Metadata m;
  MetaValue v;
  v.type = MetaType::kString;
  v.value = std::string("gpt2");
  m.set("tokenizer.ggml.model", v);
  try {
    Tokenizer::from_metadata(m);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCorrupt);
  }
}

// An unknown pre-tokenizer falls back to the GPT-2 expression (with a warning).
TEST(TokenizerErrors, UnknownPreTypeUsesGpt2Expression) {
  auto gguf = GgufFile::open(test::shared_path(kGpt2));
  auto tok = Tokenizer::from_metadata(copy_with(gguf->metadata(), "tokenizer.ggml.pre", "no-such-pre"));
  EXPECT_FALSE(tok->vocab().pre_type().known);
  for (const auto& c : test::read_vocab_cases(kGpt2)) {
    EXPECT_EQ(tok->encode(c.text, false, false), c.expected) << c.text;
  }
}

}  // namespace
}  // namespace kvlm
