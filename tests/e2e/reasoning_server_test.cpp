// Thinking models' templates over real HTTP: DeepSeek-R1's (which opens
// <think> in its generation prompt), and a Qwen3-style one (whose model
// opens it) at the end of the file. With R1's: the thinking comes apart in
// reasoning_content (delta.reasoning_content streamed), a grammar holds on
// the answer after it, max_tokens counts both, reasoning_format none leaves
// it in the content; Anthropic Messages answer it as a thinking block and
// Responses as a reasoning item. stories260K never closes a thought
// by itself: a thinking budget forces the close, so every case has the
// same shape whatever the weights write.
#include <gtest/gtest.h>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace kvlm::reasoning_server_test {

using Json = nlohmann::json;

const Json kYesNo = Json::parse(R"({"type": "json_schema", "json_schema": {"name": "verdict", "strict": true,
    "schema": {"type": "object", "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}},
               "required": ["answer"], "additionalProperties": false}}})");

class ReasoningServer : public test::ServerSuite<ReasoningServer> {
 public:
  static std::vector<std::string> server_args() {
    return {"-m", test::shared_path("models/stories260K.gguf"), "--chat-template-file", test::shared_path("templates/deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja"), "-t", "1"};
  }
  static std::pair<int, std::string> post(const std::string& path, const Json& body) {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(60);
    auto r = c.Post(path, body.dump(), "application/json");
    if (!r) return {0, ""};
    return {r->status, r->body};
  }
  static Json chat(Json extra) {
    Json body = {{"messages", Json::array({Json{{"role", "user"}, {"content", "Is the sky blue?"}}})},
                 {"temperature", 0}, {"max_tokens", 120}};
    body.update(extra);
    return body;
  }
};

// A streamed chat answer's thinking, content and finish reason.
struct Streamed {
  std::string reasoning, content, reason;
};
Streamed streamed(const std::string& body) {
  Streamed s;
  for (const std::string& d : test::sse_data(body)) {
    if (d == "[DONE]") continue;
    const Json c = Json::parse(d)["choices"][0];
    s.reasoning += c["delta"].value("reasoning_content", "");
    s.content += c["delta"].value("content", "");
    if (!c["finish_reason"].is_null()) s.reason = c["finish_reason"];
  }
  return s;
}

TEST_F(ReasoningServer, ThinkingComesApartAndTheGrammarHoldsOnTheAnswer) {
  const Json body = chat({{"thinking_budget", 12}, {"response_format", kYesNo}});
  auto [status, text] = post("/v1/chat/completions", body);
  ASSERT_EQ(status, 200) << text;
  const Json r = Json::parse(text);
  const Json& m = r["choices"][0]["message"];
  const std::string reasoning = m["reasoning_content"], content = m["content"];
  EXPECT_FALSE(reasoning.empty()) << text;
  EXPECT_EQ(reasoning.find("think>"), std::string::npos) << text;
  EXPECT_TRUE(Json::parse(content)["answer"] == "yes" || Json::parse(content)["answer"] == "no") << text;
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  EXPECT_LE(r["usage"]["completion_tokens"].get<int>(), 120);
  // Streamed, the same thinking and answer in deltas (greedy).
  Json stream_body = body;
  stream_body["stream"] = true;
  auto [status2, events] = post("/v1/chat/completions", stream_body);
  ASSERT_EQ(status2, 200) << events;
  const Streamed s = streamed(events);
  EXPECT_EQ(s.reasoning, reasoning);
  EXPECT_EQ(s.content, content);
  EXPECT_EQ(s.reason, "stop");
}

TEST_F(ReasoningServer, MaxTokensCountsTheThinkingAndNoneLeavesItInTheContent) {
  // No budget: the eight tokens are all thinking, cut by max_tokens.
  auto [status, text] = post("/v1/chat/completions", chat({{"max_tokens", 8}}));
  ASSERT_EQ(status, 200) << text;
  const Json r = Json::parse(text);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["usage"]["completion_tokens"], 8);
  const std::string reasoning = r["choices"][0]["message"]["reasoning_content"];
  EXPECT_FALSE(reasoning.empty());
  EXPECT_EQ(r["choices"][0]["message"]["content"], "");
  // reasoning_format none: the same text is the content, no reasoning_content.
  auto [status2, text2] = post("/v1/chat/completions", chat({{"max_tokens", 8}, {"reasoning_format", "none"}}));
  ASSERT_EQ(status2, 200) << text2;
  const Json r2 = Json::parse(text2);
  const Json& m = r2["choices"][0]["message"];
  EXPECT_FALSE(m.contains("reasoning_content")) << text2;
  std::string content = m["content"];
  content.erase(0, content.find_first_not_of(" \n"));
  content.erase(content.find_last_not_of(" \n") + 1);
  EXPECT_EQ(content, reasoning);
}

// A Qwen3-style template (written here: ChatML, the model opens <think>
// itself, enable_thinking false closes an empty section in the prompt). With
// a grammar or a thinking budget the server forces the open marker, so the
// thinking comes apart and the grammar holds on the answer; with thinking
// turned off the grammar holds from the first token and there is no
// reasoning_content.
TEST_F(ReasoningServer, AnthropicMessagesAnswerTheThinkingAsAThinkingBlock) {
  const Json body = {{"max_tokens", 120}, {"thinking", {{"type", "enabled"}, {"budget_tokens", 12}}},
                     {"messages", Json::array({Json{{"role", "user"}, {"content", "Is the sky blue?"}}})},
                     {"temperature", 0}};
  auto [status, text] = post("/v1/messages", body);
  ASSERT_EQ(status, 200) << text;
  const Json m = Json::parse(text);
  ASSERT_GE(m["content"].size(), 2u) << text;
  EXPECT_EQ(m["content"][0]["type"], "thinking") << text;
  const std::string thinking = m["content"][0]["thinking"];
  EXPECT_FALSE(thinking.empty()) << text;
  EXPECT_EQ(thinking.find("think>"), std::string::npos) << text;
  EXPECT_EQ(m["content"][1]["type"], "text") << text;
  // Streamed: a thinking block of thinking_delta events, then the text block.
  Json streamed = body;
  streamed["stream"] = true;
  auto [status2, events] = post("/v1/messages", streamed);
  ASSERT_EQ(status2, 200) << events;
  std::string streamed_thinking, streamed_text;
  for (const std::string& d : test::sse_data(events)) {
    const Json e = Json::parse(d);
    if (e["type"] != "content_block_delta") continue;
    if (e["delta"]["type"] == "thinking_delta") {
      EXPECT_EQ(e["index"], 0) << d;
      streamed_thinking += e["delta"]["thinking"].get<std::string>();
    } else if (e["delta"]["type"] == "text_delta") {
      EXPECT_EQ(e["index"], 1) << d;
      streamed_text += e["delta"]["text"].get<std::string>();
    }
  }
  EXPECT_EQ(streamed_thinking, thinking);
  EXPECT_EQ(streamed_text, m["content"][1]["text"]);
}

TEST_F(ReasoningServer, ResponsesAnswerTheThinkingAsAReasoningItem) {
  const Json body = {{"input", "Is the sky blue?"}, {"max_output_tokens", 40}, {"temperature", 0}};
  auto [status, text] = post("/v1/responses", body);
  ASSERT_EQ(status, 200) << text;
  const Json r = Json::parse(text);
  ASSERT_FALSE(r["output"].empty()) << text;
  const Json& item = r["output"][0];
  EXPECT_EQ(item["type"], "reasoning") << text;
  EXPECT_FALSE(item["summary"][0]["text"].get<std::string>().empty()) << text;
  const int reasoning_tokens = r["usage"]["output_tokens_details"]["reasoning_tokens"];
  EXPECT_GT(reasoning_tokens, 0) << text;
  EXPECT_LE(reasoning_tokens, 40) << text;
}

// Qwen3's chat template, cut to what matters here.
constexpr const char* kQwen3Style = R"({%- for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}{%- if add_generation_prompt %}<|im_start|>assistant
{% if enable_thinking is defined and enable_thinking is false %}<think>

</think>

{% endif %}{%- endif %})";

const Json kPerson = Json::parse(R"({"type": "json_schema", "json_schema": {"name": "person", "strict": true,
    "schema": {"type": "object", "properties": {"age": {"type": "integer", "minimum": 0, "maximum": 99}},
               "required": ["age"], "additionalProperties": false}}})");

std::pair<int, Json> post_chat(const test::ServerProcess& s, const Json& body) {
  httplib::Client c("127.0.0.1", s.port());
  c.set_read_timeout(60);
  auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
  if (!r) return {0, nullptr};
  return {r->status, body.value("stream", false) ? Json(r->body) : Json::parse(r->body)};
}

TEST(ReasoningQwen3Style, AForcedOpenSeparatesTheThinkingAndTheGrammarHoldsAfterIt) {
  const std::string tmpl = test::write_temp_file("qwen3_style.jinja", kQwen3Style);
  test::ServerProcess server({"-m", test::shared_path("models/stories260K.gguf"), "--chat-template-file", tmpl, "-t", "1"});
  ASSERT_GT(server.port(), 0);
  Json body = {{"messages", Json::array({Json{{"role", "user"}, {"content", "How old is Tom?"}}})},
               {"temperature", 0}, {"max_tokens", 100}, {"thinking_budget", 8}, {"response_format", kPerson}};
  auto [status, r] = post_chat(server, body);
  ASSERT_EQ(status, 200) << r;
  const Json& m = r["choices"][0]["message"];
  EXPECT_FALSE(m["reasoning_content"].get<std::string>().empty()) << r;
  const Json person = Json::parse(m["content"].get<std::string>());
  EXPECT_TRUE(person["age"].is_number_integer()) << r;
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  // Streamed: the same, in deltas.
  body["stream"] = true;
  auto [status2, events] = post_chat(server, body);
  ASSERT_EQ(status2, 200);
  std::string reasoning, content;
  for (const std::string& d : test::sse_data(events.get<std::string>())) {
    if (d == "[DONE]") continue;
    const Json delta = Json::parse(d)["choices"][0]["delta"];
    reasoning += delta.value("reasoning_content", "");
    content += delta.value("content", "");
  }
  EXPECT_EQ(reasoning, m["reasoning_content"]);
  EXPECT_EQ(content, m["content"]);

  // Thinking turned off: the template closes the section, the grammar holds
  // from the first token, nothing is reasoning.
  body["stream"] = false;
  body["chat_template_kwargs"] = {{"enable_thinking", false}};
  auto [status3, off] = post_chat(server, body);
  ASSERT_EQ(status3, 200) << off;
  EXPECT_TRUE(off["choices"][0]["message"]["reasoning_content"].is_null()) << off;
  EXPECT_TRUE(Json::parse(off["choices"][0]["message"]["content"].get<std::string>())["age"].is_number_integer()) << off;
}

}  // namespace kvlm::reasoning_server_test
