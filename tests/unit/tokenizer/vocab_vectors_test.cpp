// llama.cpp's tokenizer test vectors (../shared/vocab): every string must
// tokenize to exactly llama.cpp's ids, with add_special and parse_special off
// as tests/test-tokenizer-0 does.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "tokenizer/unicode.h"
#include "tokenizer_test_util.h"

namespace kvlm {
namespace {

std::string vocab_file(const std::string& name) { return "vocab/ggml-vocab-" + name + ".gguf"; }

std::string ids_string(const std::vector<int32_t>& ids) {
  return fmt::format("{}", fmt::join(ids, " "));
}

class VocabVectors : public ::testing::TestWithParam<std::string> {};

TEST_P(VocabVectors, AllStringsTokenizeAsLlamaCpp) {
  const std::string rel = vocab_file(GetParam());
  const Tokenizer& tok = test::shared_tokenizer(rel);
  const std::vector<test::VocabCase> cases = test::read_vocab_cases(rel);
  ASSERT_FALSE(cases.empty()) << rel << ": .inp and .out disagree on the number of tests";
  size_t num_passed = 0;
  for (const auto& c : cases) {
    const std::vector<int32_t> ids = tok.encode(c.text, /*add_special=*/false, /*parse_special=*/false);
    if (ids == c.expected) {
      ++num_passed;
    } else {
      ADD_FAILURE() << rel << ": '" << c.text << "'\n  expected: " << ids_string(c.expected)
                    << "\n  got:      " << ids_string(ids);
    }
  }
  RecordProperty("passed", static_cast<int>(num_passed));
  RecordProperty("total", static_cast<int>(cases.size()));
  std::printf("[ vectors  ] %-16s %zu/%zu passed\n", GetParam().c_str(), num_passed, cases.size());
  EXPECT_EQ(num_passed, cases.size());
}

// decode(encode(text)) == text wherever llama.cpp's detokenizer can give the
// text back: always for these SentencePiece vocabularies (byte fallback, the
// first leading space dropped), and for BPE unless the vocabulary's clean-up
// of spaces before punctuation and apostrophes applies.
TEST_P(VocabVectors, RoundTrip) {
  const std::string rel = vocab_file(GetParam());
  const Tokenizer& tok = test::shared_tokenizer(rel);
  size_t num_checked = 0;
  for (const auto& c : test::read_vocab_cases(rel)) {
    if (tok.vocab().clean_spaces()) {
      bool cleaned = false;
      for (const char* s : {" ?", " !", " .", " ,", " '"}) cleaned |= c.text.find(s) != std::string::npos;
      if (cleaned) continue;
    }
    const std::vector<int32_t> ids = tok.encode(c.text, false, false);
    EXPECT_EQ(tok.decode(ids), c.text) << rel << ": ids " << ids_string(ids);
    ++num_checked;
  }
  EXPECT_GT(num_checked, 30u);
}

// Streaming the vectors token by token gives back the text (both algorithms
// are lossless on these well-formed strings; the stream does no clean-up),
// in well-formed UTF-8 chunks only.
TEST_P(VocabVectors, StreamingGivesBackTheText) {
  const std::string rel = vocab_file(GetParam());
  const Tokenizer& tok = test::shared_tokenizer(rel);
  for (const auto& c : test::read_vocab_cases(rel)) {
    const std::vector<int32_t> ids = tok.encode(c.text, false, false);
    StreamingDetokenizer stream(tok, StreamOptions{.render_special = true, .strip_leading_space = true});
    std::string streamed;
    for (int32_t id : ids) {
      const std::string chunk = stream.push(id);
      EXPECT_TRUE(unicode::is_valid_utf8(chunk)) << rel << ": '" << c.text << "'";
      streamed += chunk;
    }
    streamed += stream.flush();
    EXPECT_EQ(streamed, c.text) << rel;
  }
}

INSTANTIATE_TEST_SUITE_P(Shared, VocabVectors,
                         ::testing::Values("gpt-2", "llama-spm", "phi-3", "deepseek-coder", "falcon", "starcoder"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& ch : name) ch = ch == '-' ? '_' : ch;
                           return name;
                         });

// The Llama-2 vocabulary inside a real model file tokenizes like llama.cpp's
// llama-spm vocabulary file.
TEST(VocabVectorsModel, Llama2TinyRandomMatchesLlamaSpmVectors) {
  const Tokenizer& tok = test::shared_tokenizer("models/llama-2-tiny-random.gguf");
  for (const auto& c : test::read_vocab_cases(vocab_file("llama-spm"))) {
    EXPECT_EQ(tok.encode(c.text, false, false), c.expected) << "'" << c.text << "'";
  }
}

}  // namespace
}  // namespace kvlm
