// `kvlm run` through the real binary: chat mode renders the chat template
// and tokenizes it exactly as `kvlm template` + `kvlm tokenize` would;
// template errors and bad flag combinations are clear one-line errors.
#include <gtest/gtest.h>

#include <regex>
#include <sstream>

#include "support/test_support.h"

namespace kvlm::run_cli_test {

int prompt_tokens(const std::string& err) {
  std::smatch m;
  EXPECT_TRUE(std::regex_search(err, m, std::regex("prompt: ([0-9]+) tokens"))) << err;
  return m.empty() ? -1 : std::stoi(m[1].str());
}

TEST(RunCli, ChatPromptIsTheRenderedTemplateTokenized) {
  const std::string model = test::shared_path("models/stories260K.gguf");
  const std::string tmpl = test::shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja");
  auto r = test::run_kvlm({"run", "-m", model, "-p", "Tell me a story.", "--system", "Be brief.", "--chat",
                           "--chat-template-file", tmpl, "-n", "4", "--temp", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const int num_chat_tokens = prompt_tokens(r.err);

  const std::string messages = test::write_temp_file(
      "run-chat.json",
      R"([{"role":"system","content":"Be brief."},{"role":"user","content":"Tell me a story."}])");
  auto rendered = test::run_kvlm({"template", "-m", model, "--template-file", tmpl, "--messages", messages,
                                  "--add-generation-prompt"});
  ASSERT_EQ(rendered.exit_code, 0) << rendered.err;
  EXPECT_NE(rendered.out.find("<|im_start|>assistant\n"), std::string::npos) << rendered.out;
  const std::string text = test::write_temp_file("run-chat.txt", rendered.out);
  auto tokens = test::run_kvlm({"tokenize", "-m", model, "-f", text, "--ids"});
  ASSERT_EQ(tokens.exit_code, 0) << tokens.err;
  std::istringstream ids(tokens.out);
  int n = 0;
  for (int id; ids >> id;) ++n;
  EXPECT_EQ(num_chat_tokens, n);
}

TEST(RunCli, ChatErrorsAreClear) {
  const std::string model = test::shared_path("models/stories260K.gguf");
  auto r = test::run_kvlm({"run", "-m", model, "-p", "hi", "--chat"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("no chat template"), std::string::npos) << r.err;
  r = test::run_kvlm({"run", "-m", model, "-p", "hi", "--chat", "--system", "x", "--chat-template-file",
                      test::shared_path("templates/google-gemma-2-2b-it.jinja")});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("System role not supported"), std::string::npos) << r.err;
  r = test::run_kvlm({"run", "-m", model, "-p", "hi", "--system", "x"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("need --chat"), std::string::npos) << r.err;
}

TEST(RunCli, PromptLongerThanTheContextIsRefused) {
  const std::string model = test::shared_path("models/stories260K.gguf");
  std::string prompt;
  for (int i = 0; i < 200; ++i) prompt += "Once upon a time ";
  auto r = test::run_kvlm({"run", "-m", model, "-p", prompt, "--max-model-len", "64"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("the context holds 64"), std::string::npos) << r.err;
}

TEST(RunCli, SeededSamplingIsReproducible) {
  const std::string model = test::shared_path("models/stories260K.gguf");
  auto a = test::run_kvlm({"run", "-m", model, "-p", "Once upon a time", "-n", "40", "--temp", "1", "--seed", "7"});
  auto b = test::run_kvlm({"run", "-m", model, "-p", "Once upon a time", "-n", "40", "--temp", "1", "--seed", "7"});
  auto c = test::run_kvlm({"run", "-m", model, "-p", "Once upon a time", "-n", "40", "--temp", "1", "--seed", "8"});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(a.out, c.out);
}

}  // namespace kvlm::run_cli_test
