// Tool calling over raw HTTP (curl), the cases the openai client round trip
// (openai_tools_test.cpp) does not cover: a call cut off by max_tokens and
// unforced gibberish are plain content (never a 500), n = 2 forced calls
// streamed with their choice index, a schema the grammar compiler refuses is
// a 400, and the tools reach the template.
#include <gtest/gtest.h>

#include <map>

#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace kvlm {
namespace {

using Json = nlohmann::json;

std::pair<int, std::string> post(const std::string& url, const Json& body) {
  const test::CommandResult r = test::run_program({"curl", "-sS", "-N", "-w", "\n%{http_code}", "-H",
                                                   "Content-Type: application/json", "--data-binary", body.dump(), url});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const size_t nl = r.out.rfind('\n');
  return {std::stoi(r.out.substr(nl + 1)), r.out.substr(0, nl)};
}

const Json kTools = Json::parse(R"([{"type": "function", "function": {"name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Lima"]}},
                   "required": ["city"], "additionalProperties": false}}}])");

class ToolCallsServer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new test::ServerProcess({"-m", test::shared_path("models/stories260K.gguf"), "--chat-template-file",
                                       test::shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"), "-t", "1"});
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static std::string url() { return server_->url() + "/v1/chat/completions"; }
  static Json request(Json extra) {
    Json body = {{"messages", Json::array({Json{{"role", "user"}, {"content", "Weather in Paris?"}}})},
                 {"tools", kTools}, {"temperature", 0}};
    body.update(extra);
    return body;
  }
  static test::ServerProcess* server_;
};
test::ServerProcess* ToolCallsServer::server_ = nullptr;

TEST_F(ToolCallsServer, ACutOffCallIsPlainContent) {
  // Forced, but max_tokens ends it inside the call: malformed, so content.
  auto [status, body] = post(url(), request({{"tool_choice", "required"}, {"max_tokens", 12}}));
  ASSERT_EQ(status, 200) << body;
  const Json choice = Json::parse(body)["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "length");
  EXPECT_FALSE(choice["message"].contains("tool_calls"));
  EXPECT_EQ(choice["message"]["content"].get<std::string>().rfind("<tool_call>", 0), 0u) << body;
  // Streamed, the held-back text comes out at the end, whole.
  std::tie(status, body) = post(url(), request({{"tool_choice", "required"}, {"max_tokens", 12}, {"stream", true}}));
  ASSERT_EQ(status, 200) << body;
  std::string content;
  for (const std::string& d : test::sse_data(body)) {
    if (d == "[DONE]") continue;
    const Json delta = Json::parse(d)["choices"][0]["delta"];
    EXPECT_FALSE(delta.contains("tool_calls")) << d;
    if (delta.contains("content")) content += delta["content"].get<std::string>();
  }
  EXPECT_EQ(content, choice["message"]["content"]);
}

TEST_F(ToolCallsServer, UnforcedGibberishIsContent) {
  auto [status, body] = post(url(), request({{"max_tokens", 24}}));
  ASSERT_EQ(status, 200) << body;
  const Json choice = Json::parse(body)["choices"][0];
  EXPECT_FALSE(choice["message"].contains("tool_calls")) << body;
  EXPECT_EQ(choice["finish_reason"], "length");
}

TEST_F(ToolCallsServer, TwoChoicesStreamTheirCallsWithTheirIndex) {
  auto [status, body] = post(url(), request({{"tool_choice", "required"}, {"parallel_tool_calls", false},
                                              {"n", 2}, {"temperature", 1}, {"seed", 5}, {"max_tokens", 200},
                                              {"stream", true}}));
  ASSERT_EQ(status, 200) << body;
  std::map<int, std::string> names, args, reasons;
  for (const std::string& d : test::sse_data(body)) {
    if (d == "[DONE]") continue;
    const Json c = Json::parse(d)["choices"][0];
    const int index = c["index"];
    if (c["delta"].contains("tool_calls")) {
      const Json& tc = c["delta"]["tool_calls"][0];
      EXPECT_EQ(tc["index"], 0);
      if (tc.contains("id")) {
        EXPECT_EQ(tc["type"], "function");
        names[index] += tc["function"]["name"].get<std::string>();
      }
      args[index] += tc["function"]["arguments"].get<std::string>();
    }
    if (!c["finish_reason"].is_null()) reasons[index] = c["finish_reason"];
  }
  for (int i : {0, 1}) {
    SCOPED_TRACE(i);
    EXPECT_EQ(names[i], "get_weather");
    EXPECT_EQ(reasons[i], "tool_calls");
    const Json a = Json::parse(args[i]);
    EXPECT_TRUE(a["city"] == "Paris" || a["city"] == "Lima") << args[i];
  }
  EXPECT_EQ(test::server_metric(*server_, "kvlm_kv_blocks_used"), 0);
}

TEST_F(ToolCallsServer, ASchemaTheGrammarRefusesIsA400) {
  Json tools = kTools;
  tools[0]["function"]["parameters"] = Json::parse(R"({"type": "object", "not": {"type": "string"}})");
  auto [status, body] = post(url(), request({{"tools", tools}, {"tool_choice", "required"}}));
  EXPECT_EQ(status, 400) << body;
  const Json e = Json::parse(body)["error"];
  EXPECT_EQ(e["param"], "tools");
  EXPECT_NE(e["message"].get<std::string>().find("tools[0].function.parameters"), std::string::npos) << body;
}

TEST_F(ToolCallsServer, ToolsReachTheTemplate) {
  // Qwen's template writes the tools into its system turn; none does too, as OpenAI.
  auto [s1, with] = post(url(), request({{"max_tokens", 1}, {"tool_choice", "none"}}));
  Json plain = request({{"max_tokens", 1}});
  plain.erase("tools");
  auto [s2, without] = post(url(), plain);
  ASSERT_EQ(s1, 200) << with;
  ASSERT_EQ(s2, 200) << without;
  EXPECT_GT(Json::parse(with)["usage"]["prompt_tokens"].get<int>(),
            Json::parse(without)["usage"]["prompt_tokens"].get<int>() + 100);
}

TEST_F(ToolCallsServer, ControlTokensAreWrittenWhenToolsMayBeCalled) {
  // Tool-call markers can be control tokens ([TOOL_CALLS], <|python_tag|>),
  // which plain chat writes as nothing. Forced here: stories260K's <unk> (id 0).
  Json bias = {{"logit_bias", {{"0", 100}}}, {"max_tokens", 2}};
  auto [s1, with] = post(url(), request(bias));
  Json plain = request(bias);
  plain.erase("tools");
  auto [s2, without] = post(url(), plain);
  ASSERT_EQ(s1, 200) << with;
  ASSERT_EQ(s2, 200) << without;
  EXPECT_EQ(Json::parse(with)["choices"][0]["message"]["content"], "<unk><unk>") << with;
  EXPECT_EQ(Json::parse(without)["choices"][0]["message"]["content"], "") << without;
}

}  // namespace
}  // namespace kvlm
