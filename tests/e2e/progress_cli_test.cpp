// Progress bars: drawn on stderr when it is a terminal (here a pseudo-
// terminal from util-linux `script`), and nothing extra when it is not.
#include <gtest/gtest.h>

#include "support/test_support.h"

namespace kvlm::progress_cli_test {

std::vector<std::string> perplexity_args() {
  return {"perplexity", "-m", test::shared_path("models/stories260K.gguf"), "-f",
          test::shared_path("text/tinystories_sample.txt"), "-c", "128", "--chunks", "3", "-t", "1"};
}

// Runs kvlm with stdout and stderr on a pseudo-terminal; returns what it wrote.
test::CommandResult run_on_terminal(const std::vector<std::string>& args) {
  std::string command = test::kvlm_binary();
  for (const auto& a : args) command += " '" + a + "'";
  return test::run_program({"script", "-qec", command, "/dev/null"});
}

TEST(Progress, NothingExtraWhenStderrIsNotATerminal) {
  auto r = test::run_kvlm(perplexity_args());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find('\r'), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("\033["), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("[1]"), std::string::npos) << r.err;  // the per-chunk log lines stay
  EXPECT_NE(r.out.find("PPL = "), std::string::npos) << r.out;
  r = test::run_kvlm({"bench", "batch", "-m", test::shared_path("models/stories260K.gguf"), "--requests", "2",
                      "--prompt-len", "8", "--gen-len", "2", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
}

TEST(Progress, BarsOnATerminal) {
  ASSERT_TRUE(test::have_program("script")) << "util-linux `script` is needed to give kvlm a terminal";
  auto r = run_on_terminal(perplexity_args());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("loading stories260K.gguf ["), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("perplexity ["), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("3/3 chunks"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("PPL = "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("[1]"), std::string::npos) << r.out;  // the bar replaces the per-chunk lines
  r = run_on_terminal({"bench", "batch", "-m", test::shared_path("models/stories260K.gguf"), "--requests", "2",
                       "--concurrency", "2", "--prompt-len", "8", "--gen-len", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("concurrency 2 ["), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2/2 requests"), std::string::npos) << r.out;
}

}  // namespace kvlm::progress_cli_test
