// Fill-in-the-middle through /v1/completions' `suffix` (OpenAI's legacy FIM,
// as code assistants send it), on a model with StarCoder's vocabulary (its
// <fim_prefix>, <fim_suffix>, <fim_middle> found by their text): the prompt
// is prefix-suffix-middle, the output that of the same ids sent as a prompt.
#include <gtest/gtest.h>

#include <string>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace kvlm {
namespace {

using Json = nlohmann::json;

std::string fim_model() {
  static const std::string path = [] {
    const std::string out = test::temp_path("fim-starcoder.gguf");
    const test::CommandResult r =
        test::run_kvlm({"make-model", "--vocab-from", test::shared_path("vocab/ggml-vocab-starcoder.gguf"), "-o", out,
                        "--arch", "llama", "--dim", "64", "--layers", "2", "--heads", "4", "--ffn", "128", "--type",
                        "F32", "-t", "1"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return out;
  }();
  return path;
}

class Fim : public test::ServerSuite<Fim> {
 public:
  static std::vector<std::string> server_args() { return {"-m", fim_model(), "-t", "1"}; }
  static std::pair<int, Json> post(const std::string& path, const Json& body) {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(60);
    auto r = c.Post(path, body.dump(), "application/json");
    if (!r) return {0, Json()};
    return {r->status, Json::parse(r->body)};
  }
};

TEST_F(Fim, SuffixFillsTheMiddleAsThePrefixSuffixMiddlePromptDoes) {
  const std::string prefix = "def add(a, b):\n    ";
  const std::string suffix = "\n    return c\n";
  auto [status, filled] = post("/v1/completions", {{"prompt", prefix}, {"suffix", suffix}, {"max_tokens", 12},
                                                   {"temperature", 0}, {"return_token_ids", true}});
  ASSERT_EQ(status, 200) << filled;
  // The prompt the engine ran: the FIM tokens around the two parts.
  auto [t_status, spelled] = post("/tokenize", {{"content", "<fim_prefix>" + prefix + "<fim_suffix>" + suffix + "<fim_middle>"}});
  ASSERT_EQ(t_status, 200) << spelled;
  const Json& choice = filled["choices"][0];
  EXPECT_EQ(choice["prompt_token_ids"], spelled["tokens"]);
  // The same ids as a prompt give the same middle (greedy).
  auto [i_status, by_ids] = post("/v1/completions", {{"prompt", spelled["tokens"]}, {"max_tokens", 12}, {"temperature", 0}});
  ASSERT_EQ(i_status, 200) << by_ids;
  EXPECT_EQ(choice["text"], by_ids["choices"][0]["text"]);
  EXPECT_EQ(filled["usage"]["prompt_tokens"], spelled["count"]);
}

TEST_F(Fim, SuffixRefusesEchoAndTokenIdPrompts) {
  auto [echo_status, echo] = post("/v1/completions", {{"prompt", "x"}, {"suffix", "y"}, {"echo", true}});
  EXPECT_EQ(echo_status, 400) << echo;
  EXPECT_EQ(echo["error"]["param"], "suffix");
  auto [ids_status, ids] = post("/v1/completions", {{"prompt", Json::array({1, 2})}, {"suffix", "y"}});
  EXPECT_EQ(ids_status, 400) << ids;
  EXPECT_EQ(ids["error"]["param"], "suffix");
}

// A model without FIM tokens: a clear 400 naming suffix.
TEST(FimWithoutTokens, SuffixIsRefusedByName) {
  test::ServerProcess server({"-m", test::shared_path("models/stories260K.gguf"), "-t", "1"});
  httplib::Client c("127.0.0.1", server.port());
  auto r = c.Post("/v1/completions", R"({"prompt":"a","suffix":"b"})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  const Json e = Json::parse(r->body)["error"];
  EXPECT_EQ(e["param"], "suffix");
  EXPECT_EQ(e["code"], "unsupported_parameter");
  EXPECT_NE(e["message"].get<std::string>().find("fill-in-the-middle"), std::string::npos) << e;
}

}  // namespace
}  // namespace kvlm
