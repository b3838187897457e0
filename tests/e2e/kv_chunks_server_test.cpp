// KV chunks through HTTP (docs/kv-chunks.md): chat's kv_chunk parts,
// Messages' cache_control blocks and completions' kv_chunks spans are
// accepted and answered, bad spans and marks refused with a 400 naming
// them, count_tokens and /tokenize count the prompt generation runs, the
// chunk metrics are exported, and --kv-chunks-auto makes long user messages
// chunks. stories260K with a small template that puts each message on a
// line after its role.
#include <gtest/gtest.h>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace kvlm::kv_chunks_server_test {

using Json = nlohmann::json;

constexpr const char* kTemplate =
    "{{ bos_token }}{% for m in messages %}<{{ m.role }}>\n{{ m.content | trim }}\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>\n{% endif %}";

const std::string kStory1 =
    "Once upon a time, there was a little girl named Lily. She loved to play in the park with her red ball. "
    "One day, the ball rolled into the pond and a kind duck pushed it back to her. Lily said thank you.";
const std::string kStory2 =
    "Tom had a big blue truck. Every morning he drove it around the garden and carried leaves to the tree. "
    "His dog Max ran after the truck and barked. At night Tom put the truck under his bed and slept.";

std::vector<std::string> chunk_server_args(std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"-m", test::shared_path("models/stories260K.gguf"), "--chat-template-file",
                                   test::write_temp_file("kv-chunks-template.jinja", kTemplate), "-t", "1"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

std::pair<int, Json> post(const test::ServerProcess& server, const std::string& path, const Json& body) {
  httplib::Client c("127.0.0.1", server.port());
  c.set_read_timeout(60);
  auto r = c.Post(path, body.dump(), "application/json");
  if (!r) return {0, Json()};
  return {r->status, Json::parse(r->body, nullptr, /*allow_exceptions=*/false)};
}

// A user message: a question, two stories marked as chunks, another question.
Json chat_body(const std::string& lead, const std::string& a, const std::string& b) {
  const Json content = Json::array({Json{{"type", "text"}, {"text", lead}},
                                    Json{{"type", "text"}, {"text", a}, {"kv_chunk", true}},
                                    Json{{"type", "text"}, {"text", b}, {"kv_chunk", true}},
                                    Json{{"type", "text"}, {"text", "Who has a dog?"}}});
  return {{"messages", Json::array({Json{{"role", "user"}, {"content", content}}})},
          {"max_tokens", 8}, {"temperature", 0}};
}

class KvChunksServe : public test::ServerSuite<KvChunksServe> {
 public:
  static std::vector<std::string> server_args() { return chunk_server_args(); }
};

TEST_F(KvChunksServe, ChatWithChunkPartsAnswers) {
  Json body = chat_body("Read these stories.", kStory1, kStory2);
  body["kv_blend_recompute"] = 0.3;
  const auto [status, answer] = post(*server_, "/v1/chat/completions", body);
  ASSERT_EQ(status, 200) << answer;
  EXPECT_FALSE(answer["choices"][0]["message"]["content"].get<std::string>().empty()) << answer;
  EXPECT_GT(answer["usage"]["prompt_tokens"].get<int>(), 100) << answer;
  // A whole message marked, streamed.
  Json whole = {{"messages", Json::array({Json{{"role", "user"}, {"content", kStory1}, {"kv_chunk", true}}})},
                {"max_tokens", 4}, {"stream", true}};
  httplib::Client c("127.0.0.1", server_->port());
  auto streamed = c.Post("/v1/chat/completions", whole.dump(), "application/json");
  ASSERT_TRUE(streamed);
  EXPECT_EQ(streamed->status, 200) << streamed->body;
  EXPECT_EQ(test::sse_data(streamed->body).back(), "[DONE]");
}

TEST_F(KvChunksServe, BadMarksAndSharesAreRefused) {
  Json body = chat_body("Read.", kStory1, kStory2);
  body["messages"][0]["content"][1]["kv_chunk"] = "yes";
  auto [status, answer] = post(*server_, "/v1/chat/completions", body);
  EXPECT_EQ(status, 400) << answer;
  EXPECT_EQ(answer["error"]["param"], "messages[0].content[1].kv_chunk") << answer;
  body = chat_body("Read.", kStory1, kStory2);
  body["kv_blend_recompute"] = 2;
  std::tie(status, answer) = post(*server_, "/v1/chat/completions", body);
  EXPECT_EQ(status, 400) << answer;
  EXPECT_EQ(answer["error"]["param"], "kv_blend_recompute") << answer;
}

TEST_F(KvChunksServe, MessagesWithCacheControlAnswerAndCountAlike) {
  const Json cc = {{"type", "ephemeral"}};
  const Json body = {
      {"max_tokens", 8},
      {"temperature", 0},
      {"system", Json::array({Json{{"type", "text"}, {"text", "You tell short stories."}, {"cache_control", cc}}})},
      {"messages", Json::array({Json{{"role", "user"},
                                     {"content", Json::array({Json{{"type", "text"}, {"text", kStory2}, {"cache_control", cc}},
                                                              Json{{"type", "text"}, {"text", "What did Tom have?"}}})}}})}};
  const auto [status, message] = post(*server_, "/v1/messages", body);
  ASSERT_EQ(status, 200) << message;
  EXPECT_EQ(message["type"], "message");
  ASSERT_FALSE(message["content"].empty()) << message;
  EXPECT_FALSE(message["content"][0]["text"].get<std::string>().empty()) << message;
  const Json& u = message["usage"];
  const int prompt = u["input_tokens"].get<int>() + u["cache_read_input_tokens"].get<int>();
  // count_tokens renders and tokenizes the chunks as generation does.
  Json count_body = body;
  count_body.erase("max_tokens");
  const auto [count_status, count] = post(*server_, "/v1/messages/count_tokens", count_body);
  ASSERT_EQ(count_status, 200) << count;
  EXPECT_EQ(count["input_tokens"], prompt) << count;
}

TEST_F(KvChunksServe, CompletionSpansAnswerOrAreRefused) {
  const std::string prompt = "Story: " + kStory1 + " The end.";
  const Json spans = Json::array({Json::array({7, 7 + static_cast<int>(kStory1.size())})});
  auto [status, answer] =
      post(*server_, "/v1/completions", {{"prompt", prompt}, {"kv_chunks", spans}, {"max_tokens", 8}, {"temperature", 0}});
  ASSERT_EQ(status, 200) << answer;
  EXPECT_FALSE(answer["choices"][0]["text"].get<std::string>().empty()) << answer;
  // vLLM's render route gives the ids it ran: the chunk's own among them.
  auto [render_status, rendered] = post(*server_, "/v1/completions/render", {{"prompt", prompt}, {"kv_chunks", spans}});
  ASSERT_EQ(render_status, 200) << rendered;
  EXPECT_EQ(rendered[0]["token_ids"].size(), answer["usage"]["prompt_tokens"].get<size_t>()) << rendered;
  // Token ids with token offsets.
  std::tie(status, answer) = post(*server_, "/v1/completions",
                                  {{"prompt", Json::array({1, 403, 407, 261, 378})}, {"kv_chunks", Json::parse("[[1, 4]]")},
                                   {"max_tokens", 4}});
  EXPECT_EQ(status, 200) << answer;
  for (const Json& bad : {Json::parse("[[0, 3], [2, 5]]"), Json::parse("[[5, 5]]"), Json::parse("[[0, 100000]]"),
                          Json::parse("[\"0:3\"]")}) {
    std::tie(status, answer) = post(*server_, "/v1/completions", {{"prompt", prompt}, {"kv_chunks", bad}});
    EXPECT_EQ(status, 400) << bad << answer;
    EXPECT_EQ(answer["error"]["param"], "kv_chunks") << answer;
  }
}

TEST_F(KvChunksServe, MetricsExportTheChunkCounters) {
  const std::string text = test::metrics_text(*server_);
  for (const char* name : {"kvlm_kv_chunk_lookups_total", "kvlm_kv_chunk_hits_total", "kvlm_kv_chunk_reused_tokens_total",
                           "kvlm_kv_chunk_recomputed_tokens_total"}) {
    EXPECT_GE(test::metric_sample(text, name), 0) << name;
    EXPECT_NE(text.find(std::string("# TYPE ") + name + " counter"), std::string::npos) << name;
  }
}

// The second request holds the same stories as the first, in the other
// order after another opening: no block of its prefix is the first's, so
// the tokens served from cache can only be the stories' chunks.
TEST_F(KvChunksServe, ReorderedChunkIsReused) {
  auto [status, first] = post(*server_, "/v1/chat/completions", chat_body("Read these stories.", kStory1, kStory2));
  ASSERT_EQ(status, 200) << first;
  auto [status2, second] =
      post(*server_, "/v1/chat/completions", chat_body("Here are two other tales for you.", kStory2, kStory1));
  ASSERT_EQ(status2, 200) << second;
  EXPECT_GT(second["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0) << second;
  EXPECT_GT(test::server_metric(*server_, "kvlm_kv_chunk_hits_total"), 0);
}

class KvChunksAuto : public test::ServerSuite<KvChunksAuto> {
 public:
  static std::vector<std::string> server_args() { return chunk_server_args({"--kv-chunks-auto", "32"}); }
  // The prompt ids /tokenize gives for one user message.
  static Json tokens(const std::string& text, bool marked) {
    Json m = {{"role", "user"}, {"content", text}};
    if (marked) m["kv_chunk"] = true;
    const auto [status, answer] = post(*server_, "/tokenize", {{"messages", Json::array({m})}});
    EXPECT_EQ(status, 200) << answer;
    return answer["tokens"];
  }
};

TEST_F(KvChunksAuto, LongUserMessagesAreChunks) {
  // Long enough: the same prompt as with the mark, not the whole text's.
  const Json long_ids = tokens(kStory1, false);
  EXPECT_EQ(long_ids, tokens(kStory1, true));
  const auto [status, rendered] = post(*server_, "/apply-template",
                                       {{"messages", Json::array({Json{{"role", "user"}, {"content", kStory1}}})}});
  ASSERT_EQ(status, 200) << rendered;
  const auto [tok_status, whole] = post(*server_, "/tokenize", {{"content", rendered["prompt"]}});
  ASSERT_EQ(tok_status, 200) << whole;
  EXPECT_NE(long_ids, whole["tokens"]);
  // Below --kv-chunks-auto's tokens: no chunk unless marked.
  EXPECT_NE(tokens("Hi there.", false), tokens("Hi there.", true));
}

}  // namespace kvlm::kv_chunks_server_test
