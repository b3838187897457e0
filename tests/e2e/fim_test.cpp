// Fill-in-the-middle through /v1/completions' `suffix` (OpenAI's legacy FIM)
// and llama.cpp's /infill, as code assistants send them, on a model with
// StarCoder's vocabulary (its <fim_prefix>, <fim_suffix>, <fim_middle> found
// by their text): the prompt is prefix-suffix-middle, the output that of the
// same ids sent as a prompt.
#include <gtest/gtest.h>

#include <string>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace kvlm::fim_test {

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

// llama.cpp's /infill: another file as context (after a snippet line: this
// vocabulary's <repo_name> and <file_sep> are not the spellings llama.cpp
// takes for the repository format), the prefix, suffix and the text typed at
// the gap; the middle is that of the same ids as a prompt, whole and
// streamed in llama.cpp's native shape.
TEST_F(Fim, InfillWithOtherFilesIsTheSpelledPromptsCompletion) {
  const Json request = {{"input_prefix", "def add(a, b):\n    "}, {"input_suffix", "\n    return c\n"},
                        {"input_extra", Json::array({Json{{"filename", "util.py"}, {"text", "x = 1\n"}}})},
                        {"prompt", "c"}, {"n_predict", 10}, {"temperature", 0}};
  auto [status, whole] = post("/infill", request);
  ASSERT_EQ(status, 200) << whole;
  // llama.cpp's layout, each piece tokenized on its own: the special tokens,
  // then the texts as text.
  Json ids = Json::array();
  auto add = [&](const std::string& piece, bool special) {
    auto [status, t] = post("/tokenize", {{"content", piece}, {"add_special", false}, {"parse_special", special}});
    ASSERT_EQ(status, 200) << t;
    if (special) { ASSERT_EQ(t["tokens"].size(), 1u) << piece << " is not one token: " << t; }
    for (const Json& id : t["tokens"]) ids.push_back(id);
  };
  for (const auto& [piece, special] : std::vector<std::pair<std::string, bool>>{
           {"\n\n--- snippet ---\n\n", false}, {"x = 1\n", false}, {"<fim_prefix>", true},
           {"def add(a, b):\n    ", false}, {"<fim_suffix>", true}, {"\n    return c\n", false},
           {"<fim_middle>", true}, {"c", false}})
    add(piece, special);
  EXPECT_EQ(whole["tokens_evaluated"], ids.size());
  auto [i_status, by_ids] = post("/v1/completions", {{"prompt", ids}, {"max_tokens", 10}, {"temperature", 0}});
  ASSERT_EQ(i_status, 200) << by_ids;
  EXPECT_EQ(whole["content"], by_ids["choices"][0]["text"]);
  EXPECT_EQ(whole["stop"], true);
  EXPECT_EQ(whole["stop_type"], "limit");
  EXPECT_EQ(whole["tokens_predicted"], 10);

  Json streamed_request = request;
  streamed_request["stream"] = true;
  httplib::Client c("127.0.0.1", server_->port());
  auto r = c.Post("/infill", streamed_request.dump(), "application/json");
  ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
  std::string content;
  Json last;
  for (const std::string& data : test::sse_data(r->body)) {
    last = Json::parse(data);
    content += last["content"].get<std::string>();
  }
  EXPECT_EQ(content, whole["content"]);
  EXPECT_EQ(last["stop"], true) << r->body;
  EXPECT_EQ(last["tokens_predicted"], 10);

  auto [bad_status, bad] = post("/infill", {{"input_prefix", 3}});
  EXPECT_EQ(bad_status, 400) << bad;
  EXPECT_EQ(bad["error"]["param"], "input_prefix");
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


// Through kvlm router: /infill answers as the worker does, whole and streamed.
TEST_F(Fim, InfillThroughTheRouterIsTheWorkersAnswer) {
  test::ServerProcess router({"--workers", server_->url()}, "router");
  const Json request = {{"input_prefix", "def add(a, b):\n    "}, {"input_suffix", "\n    return c\n"},
                        {"n_predict", 8}, {"temperature", 0}};
  httplib::Client via(router.url());
  via.set_read_timeout(60);
  const auto routed = via.Post("/infill", request.dump(), "application/json");
  ASSERT_TRUE(routed);
  ASSERT_EQ(routed->status, 200) << routed->body;
  const auto [status, direct] = post("/infill", request);
  ASSERT_EQ(status, 200);
  EXPECT_EQ(Json::parse(routed->body)["content"], direct["content"]);
  Json streamed = request;
  streamed["stream"] = true;
  const auto stream = via.Post("/infill", streamed.dump(), "application/json");
  ASSERT_TRUE(stream);
  std::string text;
  for (const std::string& data : test::sse_data(stream->body))
    if (data != "[DONE]") text += Json::parse(data).value("content", "");
  EXPECT_EQ(text, direct["content"]);
}

}  // namespace kvlm::fim_test
