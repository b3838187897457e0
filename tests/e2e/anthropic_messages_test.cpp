// Anthropic's Messages API (POST /v1/messages) over real HTTP: the official
// @anthropic-ai/sdk client (tests/npm/anthropic_messages.mjs) for a plain
// message, the same streamed, and a tool use round trip streamed and not;
// raw requests for the event sequence, stop sequences, cached prompt tokens,
// x-api-key, and refusals in Anthropic's error shape. stories260K with
// Qwen2.5's template (hermes calls): a forced call's arguments follow the
// tool's schema, so greedy decoding makes a deterministic round trip. The
// server answers to the model name "kvlm" (--served-model-name).
#include <gtest/gtest.h>

#include <filesystem>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace kvlm::anthropic_messages_test {

using Json = nlohmann::json;

class AnthropicMessages : public test::ServerSuite<AnthropicMessages> {
 public:
  static std::vector<std::string> server_args() {
    return {"-m", test::shared_path("models/stories260K.gguf"), "--chat-template-file",
            test::shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"), "-t", "1", "--served-model-name", "kvlm"};
  }
  static std::pair<int, std::string> post(const Json& body, const httplib::Headers& headers = {}) {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(60);
    auto r = c.Post("/v1/messages", headers, body.dump(), "application/json");
    if (!r) return {0, ""};
    return {r->status, r->body};
  }
  static Json ask(Json extra) {
    Json body = {{"model", "kvlm"}, {"max_tokens", 24}, {"temperature", 0},
                 {"messages", Json::array({Json{{"role", "user"}, {"content", "Once upon a time"}}})}};
    body.update(extra);
    return body;
  }
};

// A message's whole prompt: Anthropic's usage counts the cached part apart.
int prompt_tokens(const Json& message) {
  const Json& u = message["usage"];
  return u["input_tokens"].get<int>() + u["cache_read_input_tokens"].get<int>() +
         u["cache_creation_input_tokens"].get<int>();
}

// One tool_use block with get_weather's input, as the schema allows.
void expect_tool_use(const Json& message) {
  EXPECT_EQ(message["stop_reason"], "tool_use") << message;
  int num_calls = 0;
  for (const Json& b : message["content"]) {
    if (b["type"] != "tool_use") continue;
    ++num_calls;
    EXPECT_EQ(b["name"], "get_weather") << message;
    EXPECT_TRUE(b["input"]["city"] == "Paris" || b["input"]["city"] == "Lima") << message;
    EXPECT_FALSE(b["id"].get<std::string>().empty());
  }
  EXPECT_EQ(num_calls, 1) << message;
}

TEST_F(AnthropicMessages, TheOfficialClientPlainStreamedAndToolUse) {
  ASSERT_TRUE(test::have_program("node")) << "node is required (scripts/setup.sh installs it)";
  ASSERT_TRUE(std::filesystem::exists(std::string(KVLM_SOURCE_DIR) + "/tests/npm/node_modules/@anthropic-ai/sdk"))
      << "tests/npm/node_modules/@anthropic-ai/sdk is missing: run npm ci --prefix tests/npm";
  const std::string script = std::string(KVLM_SOURCE_DIR) + "/tests/npm/anthropic_messages.mjs";
  const test::CommandResult r = test::run_program({"node", script, server_->url()});
  ASSERT_EQ(r.exit_code, 0) << r.err << server_->err_so_far();
  const Json j = Json::parse(r.out);
  const Json& plain = j["plain"];
  EXPECT_EQ(plain["type"], "message");
  EXPECT_EQ(plain["role"], "assistant");
  EXPECT_EQ(plain["id"].get<std::string>().rfind("msg_", 0), 0u) << plain;
  ASSERT_EQ(plain["content"].size(), 1u) << plain;
  EXPECT_EQ(plain["content"][0]["type"], "text");
  EXPECT_FALSE(plain["content"][0]["text"].get<std::string>().empty());
  EXPECT_TRUE(plain["stop_reason"] == "max_tokens" || plain["stop_reason"] == "end_turn") << plain;
  EXPECT_GT(plain["usage"]["input_tokens"].get<int>(), 0);
  EXPECT_GT(plain["usage"]["output_tokens"].get<int>(), 0);
  // Greedy: the stream gives the same message, and its text events add up to it.
  EXPECT_EQ(j["streamed"]["content"], plain["content"]) << j["streamed"];
  EXPECT_EQ(j["streamed"]["stop_reason"], plain["stop_reason"]);
  EXPECT_EQ(j["streamed_text"], plain["content"][0]["text"]);
  EXPECT_EQ(j["streamed"]["usage"]["output_tokens"], plain["usage"]["output_tokens"]);
  for (const char* run : {"tool", "tool_stream"}) {
    SCOPED_TRACE(run);
    expect_tool_use(j[run]["call"]);
    const Json& answer = j[run]["answer"];
    EXPECT_TRUE(answer["stop_reason"] == "max_tokens" || answer["stop_reason"] == "end_turn") << answer;
  }
  // The SDK's countTokens: the prompt the message read for the same request
  // (its usage splits it into input_tokens and cache_read_input_tokens).
  EXPECT_EQ(j["counted_plain"]["input_tokens"], prompt_tokens(plain)) << j["counted_plain"];
  EXPECT_EQ(j["counted_tool"]["input_tokens"], prompt_tokens(j["tool"]["call"])) << j["counted_tool"];
  EXPECT_EQ(j["refused"]["status"], 400) << j["refused"];
  EXPECT_EQ(j["refused"]["type"], "invalid_request_error") << j["refused"];
  EXPECT_NE(j["refused"]["message"].get<std::string>().find("max_tokens"), std::string::npos);
}

TEST_F(AnthropicMessages, TheStreamSendsTheEventsInAnthropicsOrder) {
  auto [status, body] = post(ask({{"stream", true}}));
  ASSERT_EQ(status, 200) << body;
  std::vector<std::string> names;
  std::string text;
  for (size_t pos = 0; (pos = body.find("event: ", pos)) != std::string::npos;) {
    const size_t end = body.find('\n', pos);
    names.push_back(body.substr(pos + 7, end - pos - 7));
    const size_t data = body.find("data: ", end);
    const Json d = Json::parse(body.substr(data + 6, body.find('\n', data) - data - 6));
    EXPECT_EQ(d["type"], names.back()) << body;
    if (d["type"] == "content_block_delta") text += d["delta"]["text"].get<std::string>();
    pos = end;
  }
  ASSERT_GE(names.size(), 6u) << body;
  EXPECT_EQ(names[0], "message_start");
  EXPECT_EQ(names[1], "ping");
  EXPECT_EQ(names[2], "content_block_start");
  EXPECT_EQ(names[3], "content_block_delta");
  EXPECT_EQ(names[names.size() - 3], "content_block_stop");
  EXPECT_EQ(names[names.size() - 2], "message_delta");
  EXPECT_EQ(names.back(), "message_stop");
  auto [s2, whole] = post(ask(Json::object()));
  ASSERT_EQ(s2, 200) << whole;
  EXPECT_EQ(text, Json::parse(whole)["content"][0]["text"]);
}

TEST_F(AnthropicMessages, StopSequencesAndCachedPromptTokens) {
  // A long system prompt, asked twice: the second is served from the prefix cache.
  std::string system;
  for (int i = 0; i < 40; ++i) system += "The cat sat on the mat and looked at the dog. ";
  auto [s1, first] = post(ask({{"system", system}}));
  ASSERT_EQ(s1, 200) << first;
  auto [s2, second] = post(ask({{"system", Json::array({Json{{"type", "text"}, {"text", system}}})}}));
  ASSERT_EQ(s2, 200) << second;
  const Json a = Json::parse(first), b = Json::parse(second);
  EXPECT_EQ(a["content"], b["content"]);
  EXPECT_GT(b["usage"]["cache_read_input_tokens"].get<int>(), 0) << second;
  EXPECT_EQ(a["usage"]["input_tokens"].get<int>() + a["usage"]["cache_read_input_tokens"].get<int>(),
            b["usage"]["input_tokens"].get<int>() + b["usage"]["cache_read_input_tokens"].get<int>());
  // A stop sequence taken from the text: stop_reason says which.
  const std::string text = a["content"][0]["text"];
  ASSERT_GT(text.size(), 6u) << first;
  const std::string stop = text.substr(3, 3);
  auto [s3, stopped] = post(ask({{"system", system}, {"stop_sequences", Json::array({stop})}}));
  ASSERT_EQ(s3, 200) << stopped;
  const Json c = Json::parse(stopped);
  EXPECT_EQ(c["stop_reason"], "stop_sequence") << stopped;
  EXPECT_EQ(c["stop_sequence"], stop) << stopped;
}

TEST_F(AnthropicMessages, RefusalsAreInAnthropicsErrorShape) {
  const Json image = {{"role", "user"}, {"content", Json::array({Json{{"type", "image"},
                                                                      {"source", Json::object()}}})}};
  const Json web_search = Json::array({Json{{"type", "web_search_20250305"}, {"name", "web_search"}}});
  for (const Json& body : {ask({{"messages", Json::array({image})}}), ask({{"tools", web_search}}),
                           ask({{"max_tokens", nullptr}})}) {
    auto [status, text] = post(body);
    EXPECT_EQ(status, 400) << text;
    const Json e = Json::parse(text);
    EXPECT_EQ(e["type"], "error") << text;
    EXPECT_EQ(e["error"]["type"], "invalid_request_error") << text;
  }
}

TEST(AnthropicMessagesKey, XApiKeyIsAcceptedAndAMissingKeyIsAnAuthenticationError) {
  test::ServerProcess server({"-m", test::shared_path("models/stories260K.gguf"), "--chat-template-file",
                              test::shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"), "-t", "1",
                              "--served-model-name", "kvlm", "--api-key", "sk-secret"});
  ASSERT_GT(server.port(), 0);
  httplib::Client c("127.0.0.1", server.port());
  const Json body = {{"model", "kvlm"}, {"max_tokens", 4},
                     {"messages", Json::array({Json{{"role", "user"}, {"content", "Hi"}}})}};
  auto ok = c.Post("/v1/messages", httplib::Headers{{"x-api-key", "sk-secret"}}, body.dump(), "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  auto no = c.Post("/v1/messages", body.dump(), "application/json");
  ASSERT_TRUE(no);
  EXPECT_EQ(no->status, 401);
  EXPECT_EQ(Json::parse(no->body)["error"]["type"], "authentication_error") << no->body;
}

// count_tokens over HTTP: the input tokens a message of the same request
// reads (system, tools, a tool round trip), for each; Anthropic's refusals.
TEST_F(AnthropicMessages, CountTokensIsWhatTheMessageReads) {
  const Json weather = {{"name", "get_weather"}, {"input_schema", {{"type", "object"}}}};
  const std::vector<Json> extras = {
      Json::object(),
      {{"system", "You tell short stories."}},
      {{"system", "Be brief."}, {"tools", Json::array({weather})}},
      {{"messages", Json::array({Json{{"role", "user"}, {"content", "Weather?"}},
                                 Json{{"role", "assistant"}, {"content", Json::array({Json{{"type", "tool_use"}, {"id", "toolu_1"},
                                                                                            {"name", "get_weather"}, {"input", {{"city", "Lima"}}}}})}},
                                 Json{{"role", "user"}, {"content", Json::array({Json{{"type", "tool_result"}, {"tool_use_id", "toolu_1"},
                                                                                      {"content", "Sunny"}}})}}})},
       {"tools", Json::array({weather})}},
  };
  httplib::Client c("127.0.0.1", server_->port());
  c.set_read_timeout(60);
  for (const Json& extra : extras) {
    Json asked = ask(extra);
    asked["max_tokens"] = 1;
    auto [status, text] = post(asked);
    ASSERT_EQ(status, 200) << text;
    Json counted_body = asked;
    counted_body.erase("max_tokens");
    counted_body.erase("temperature");
    auto r = c.Post("/v1/messages/count_tokens", counted_body.dump(), "application/json");
    ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
    EXPECT_EQ(Json::parse(r->body), (Json{{"input_tokens", prompt_tokens(Json::parse(text))}})) << extra;
  }
  auto empty = c.Post("/v1/messages/count_tokens", R"({"model":"kvlm","messages":[]})", "application/json");
  ASSERT_TRUE(empty);
  EXPECT_EQ(empty->status, 400);
  EXPECT_EQ(Json::parse(empty->body)["error"]["type"], "invalid_request_error") << empty->body;
  auto unknown = c.Post("/v1/messages/count_tokens", R"({"model":"nope","messages":[{"role":"user","content":"x"}]})",
                        "application/json");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
  EXPECT_EQ(Json::parse(unknown->body)["error"]["type"], "not_found_error") << unknown->body;
}

}  // namespace kvlm::anthropic_messages_test
