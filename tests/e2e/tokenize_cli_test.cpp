// `kvlm tokenize` through the real binary: llama.cpp's vocab test vectors
// (each string written to a file and read back byte for byte with -f),
// special tokens on and off, and a clear error for a missing file.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace kvlm::tokenize_cli_test {

// The ids as `kvlm tokenize --ids` prints them: one line, single spaces.
std::string ids_line(const std::vector<int32_t>& ids) {
  std::string line;
  for (int32_t id : ids) line += (line.empty() ? "" : " ") + std::to_string(id);
  return line + "\n";
}

void expect_vectors(const std::string& vocab) {
  const std::string gguf = "vocab/ggml-vocab-" + vocab + ".gguf";
  const std::string model = test::shared_path(gguf);
  size_t index = 0, num_passed = 0;
  const std::vector<test::VocabCase> cases = test::read_vocab_cases(gguf);
  for (const test::VocabCase& c : cases) {
    const std::string file = test::write_temp_file("tokenize-" + vocab + "-" + std::to_string(index++) + ".txt", c.text);
    const test::CommandResult r = test::run_kvlm({"tokenize", "-m", model, "-f", file, "--ids", "--no-bos"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("tokens/s"), std::string::npos) << r.err;
    if (r.out == ids_line(c.expected)) {
      ++num_passed;
    } else {
      ADD_FAILURE() << vocab << ": '" << c.text << "'\n  expected: " << ids_line(c.expected) << "  got:      " << r.out;
    }
  }
  std::printf("[ cli      ] %-16s %zu/%zu passed\n", vocab.c_str(), num_passed, cases.size());
}

TEST(TokenizeCli, LlamaSpmVectors) { expect_vectors("llama-spm"); }
TEST(TokenizeCli, Phi3Vectors) { expect_vectors("phi-3"); }
TEST(TokenizeCli, Gpt2Vectors) { expect_vectors("gpt-2"); }

TEST(TokenizeCli, SpecialTokensAndPieces) {
  const std::string model = test::shared_path("models/stories260K.gguf");
  test::CommandResult r = test::run_kvlm({"tokenize", "-m", model, "-p", "Once upon a time", "--ids"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "1 403 407 261 378\n");
  r = test::run_kvlm({"tokenize", "-m", model, "-p", "Once upon a time"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "1 '<s>'\n403 ' Once'\n407 ' upon'\n261 ' a'\n378 ' time'\n");
  // "<s>" in the text is BOS unless --no-bos.
  r = test::run_kvlm({"tokenize", "-m", model, "-p", "<s>Once", "--ids"});
  EXPECT_EQ(r.out, "1 1 403\n");
  r = test::run_kvlm({"tokenize", "-m", model, "-p", "<s>Once", "--ids", "--no-bos"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream ids(r.out);
  size_t num_ids = 0;
  for (int id; ids >> id; ++num_ids) EXPECT_NE(id, 1) << r.out;
  EXPECT_GT(num_ids, 2u) << r.out;
}

TEST(TokenizeCli, MissingFileIsOneClearLine) {
  const std::string model = test::shared_path("models/stories260K.gguf");
  const std::string missing = test::temp_dir() + "/no-such-text.txt";
  test::CommandResult r = test::run_kvlm({"tokenize", "-m", model, "-f", missing});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find(missing), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;

  r = test::run_kvlm({"tokenize", "-m", test::temp_dir() + "/no-such-model.gguf", "-p", "x"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("no-such-model.gguf"), std::string::npos) << r.err;

  r = test::run_kvlm({"tokenize", "-m", model});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("-p"), std::string::npos) << r.err;
}

}  // namespace kvlm::tokenize_cli_test
