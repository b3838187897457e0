// A key's tokens per minute are charged for every API that spends tokens,
// by kvlm serve and through kvlm router alike: chat completions and
// completions, Anthropic's Messages and OpenAI's Responses (whole and
// streamed), and embeddings. One request spends a small key's minute; the
// next gets 429 naming tokens_per_minute.
#include <gtest/gtest.h>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "e2e/router_fleet.h"
#include "support/test_support.h"

namespace kvlm::front_door_tokens_test {

using Json = nlohmann::json;

struct Call {
  std::string name, path;
  Json body;
};

// Each API's request, large enough to spend a key of 20 tokens a minute.
std::vector<Call> calls() {
  const Json say = {{"role", "user"}, {"content", "Tell me a story about a cat"}};
  return {
      {"chat", "/v1/chat/completions", {{"messages", {say}}, {"max_tokens", 16}}},
      {"messages", "/v1/messages", {{"model", "m"}, {"messages", {say}}, {"max_tokens", 16}}},
      {"messages-stream", "/v1/messages", {{"model", "m"}, {"messages", {say}}, {"max_tokens", 16}, {"stream", true}}},
      {"responses", "/v1/responses", {{"input", "Tell me a story about a cat"}, {"max_output_tokens", 16}}},
      {"responses-stream", "/v1/responses",
       {{"input", "Tell me a story about a cat"}, {"max_output_tokens", 16}, {"stream", true}}},
      {"embeddings", "/v1/embeddings", {{"input", std::string(200, 'a')}}},
  };
}

std::string key_file() {
  std::string text;
  for (const Call& c : calls()) text += "sk-" + c.name + " name=" + c.name + " tpm=20\n";
  return test::write_temp_file("token_keys.txt", text);
}

int post(int port, const Call& c) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(30);
  auto r = cli.Post(c.path, {{"Authorization", "Bearer sk-" + c.name}}, c.body.dump(), "application/json");
  return r ? r->status : -1;
}

void expect_each_api_charged(int port) {
  for (const Call& c : calls()) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(post(port, c), 200) << "the first request has the minute's tokens";
    EXPECT_EQ(post(port, c), 429) << "its tokens were charged";
  }
}

TEST(FrontDoorTokens, EveryApiChargesItsKey) {
  test::ServerProcess server({"-m", test::shared_path("models/stories260K.gguf"), "-t", "1", "--chat-template-file",
                              test::shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"), "--served-model-name", "m",
                              "--api-key-file", key_file()});
  expect_each_api_charged(server.port());
  httplib::Client cli("127.0.0.1", server.port());
  const std::string metrics = cli.Get("/metrics")->body;
  for (const Call& c : calls())
    EXPECT_GT(test::metric_sample(metrics, "kvlm_api_key_tokens_total{key=\"" + c.name + "\"}"), 20) << c.name;
}

TEST(FrontDoorTokens, TheRouterChargesEveryApiToo) {
  test::Fleet fleet({.num_workers = 1, .worker_args = {"--served-model-name", "m"},
                     .router_args = {"--policy", "least-load", "--api-key-file", key_file()}});
  expect_each_api_charged(fleet.router_port());
}

}  // namespace kvlm::front_door_tokens_test
