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

namespace kvlm {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Case {
  std::string text;
  std::string expected_ids;  // space-separated, as the .out line without surrounding spaces
};

// The .inp/.out format of llama.cpp's tests/test-tokenizer-0.
std::vector<Case> read_cases(const std::string& gguf) {
  const std::string raw = slurp(test::shared_path(gguf + ".inp"));
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  for (size_t pos = 0; pos < raw.size();) {
    const size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      inputs.push_back(raw.substr(pos));
      break;
    }
    inputs.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::istringstream out(slurp(test::shared_path(gguf + ".out")));
  std::vector<Case> cases;
  std::string line;
  for (size_t i = 0; std::getline(out, line) && i < inputs.size(); ++i) {
    std::istringstream ids(line);
    std::string joined;
    for (std::string id; ids >> id;) joined += (joined.empty() ? "" : " ") + id;
    cases.push_back({inputs[i], joined});
  }
  EXPECT_EQ(cases.size(), inputs.size()) << gguf;
  return cases;
}

std::string write_temp(const std::string& name, const std::string& bytes) {
  const std::string path = test::temp_dir() + "/" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

void expect_vectors(const std::string& vocab) {
  const std::string gguf = "vocab/ggml-vocab-" + vocab + ".gguf";
  const std::string model = test::shared_path(gguf);
  size_t index = 0, num_passed = 0;
  const std::vector<Case> cases = read_cases(gguf);
  for (const Case& c : cases) {
    const std::string file = write_temp("tokenize-" + vocab + "-" + std::to_string(index++) + ".txt", c.text);
    const test::CommandResult r = test::run_kvlm({"tokenize", "-m", model, "-f", file, "--ids", "--no-bos"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("tokens/s"), std::string::npos) << r.err;
    if (r.out == c.expected_ids + "\n") {
      ++num_passed;
    } else {
      ADD_FAILURE() << vocab << ": '" << c.text << "'\n  expected: " << c.expected_ids << "\n  got:      " << r.out;
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

}  // namespace
}  // namespace kvlm
