// OpenAI's Responses API (POST /v1/responses, GET and DELETE
// /v1/responses/{id}) over real HTTP with the official openai npm client
// (tests/npm/openai_responses.mjs): plain, streamed (the raw events and the
// client's responses.stream helper), a function tool round trip streamed
// and not, text.format json_schema, two turns joined by previous_response_id
// (the second's prompt served from the prefix cache), retrieve, delete, and
// a refused built-in tool; raw requests for store false and an unknown
// previous_response_id; two servers sharing a Redis KV tier continue each
// other's stored conversations. stories260K with Qwen2.5's template (hermes
// calls).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "support/test_support.h"
#include "unit/kvstore/redis_server.h"

namespace kvlm::openai_responses_test {

using Json = nlohmann::json;

// The text of a response's message items.
std::string output_text(const Json& r) {
  std::string out;
  for (const Json& item : r["output"])
    if (item["type"] == "message")
      for (const Json& part : item["content"]) out += part["text"].get<std::string>();
  return out;
}

void expect_call(const Json& r) {
  int num_calls = 0;
  for (const Json& item : r["output"]) {
    if (item["type"] != "function_call") continue;
    ++num_calls;
    EXPECT_EQ(item["name"], "get_weather") << r;
    EXPECT_EQ(item["status"], "completed") << r;
    EXPECT_EQ(item["call_id"].get<std::string>().rfind("call_", 0), 0u) << r;
    const Json args = Json::parse(item["arguments"].get<std::string>());
    EXPECT_TRUE(args["city"] == "Paris" || args["city"] == "Lima") << r;
  }
  EXPECT_EQ(num_calls, 1) << r;
  EXPECT_EQ(r["status"], "completed") << r;
}

TEST(OpenAiResponses, TheOfficialClient) {
  ASSERT_TRUE(test::have_program("node")) << "node is required (scripts/setup.sh installs it)";
  test::ServerProcess server({"-m", test::shared_path("models/stories260K.gguf"), "--chat-template-file",
                              test::shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"), "-t", "1"});
  ASSERT_GT(server.port(), 0);
  const std::string script = std::string(KVLM_SOURCE_DIR) + "/tests/npm/openai_responses.mjs";
  const test::CommandResult r = test::run_program({"node", script, server.url()});
  ASSERT_EQ(r.exit_code, 0) << r.err << server.err_so_far();
  const Json j = Json::parse(r.out);
  const Json& plain = j["plain"];
  EXPECT_EQ(plain["object"], "response");
  EXPECT_EQ(plain["id"].get<std::string>().rfind("resp_", 0), 0u) << plain;
  const std::string text = output_text(plain);
  EXPECT_FALSE(text.empty()) << plain;
  EXPECT_EQ(plain["output_text"], text);  // the client's own sum of the message text
  // stories260K rarely ends by itself: cut by max_output_tokens, or complete.
  if (plain["status"] == "incomplete") EXPECT_EQ(plain["incomplete_details"]["reason"], "max_output_tokens");
  else EXPECT_EQ(plain["status"], "completed") << plain;
  EXPECT_EQ(plain["usage"]["output_tokens"], 24);
  // Streamed: the event order, the same text (greedy), the same final response.
  const Json events = j["streamed"]["events"];
  EXPECT_EQ(j["streamed"]["sequence"], true) << "sequence_number out of order";
  ASSERT_GE(events.size(), 8u) << events;
  EXPECT_EQ(events[0], "response.created");
  EXPECT_EQ(events[1], "response.in_progress");
  EXPECT_EQ(events[2], "response.output_item.added");
  EXPECT_EQ(events[3], "response.content_part.added");
  EXPECT_EQ(events[4], "response.output_text.delta");
  EXPECT_TRUE(events.back() == "response.completed" || events.back() == "response.incomplete") << events;
  EXPECT_EQ(j["streamed"]["text"], text);
  EXPECT_EQ(output_text(j["streamed"]["response"]), text);
  EXPECT_EQ(output_text(j["helper"]), text);
  // Function tools: a named choice is one call; its output goes back; an answer comes.
  for (const char* run : {"tool", "tool_stream"}) {
    SCOPED_TRACE(run);
    expect_call(j[run]["call"]);
    EXPECT_FALSE(j[run]["answer"]["output"].empty()) << j[run]["answer"];
  }
  EXPECT_FALSE(j["tool_stream"]["arg_deltas"].empty()) << j["tool_stream"];
  EXPECT_GT(j["long_arg_deltas"].size(), 1u) << j["long_arg_deltas"];
  std::string joined;
  for (const Json& d : j["long_arg_deltas"]) joined += d.get<std::string>();
  EXPECT_EQ(joined, R"({"text":"the quick brown fox jumps over the lazy dog and runs far away"})");
  // text.format json_schema holds.
  const Json person = Json::parse(output_text(j["json"]));
  EXPECT_TRUE(person["age"].is_number_integer()) << j["json"];
  // previous_response_id: the second turn's prompt starts with the first's
  // prompt and answer, which the prefix cache serves: more than the system
  // prompt every request shares (the first turn's cached tokens), about the
  // whole first prompt (whole blocks of it).
  const Json& turn1 = j["turns"][0];
  const Json& turn2 = j["turns"][1];
  EXPECT_EQ(turn2["previous_response_id"], turn1["id"]);
  EXPECT_GT(turn2["usage"]["input_tokens"].get<int>(), turn1["usage"]["input_tokens"].get<int>());
  const int cached1 = turn1["usage"]["input_tokens_details"]["cached_tokens"];
  const int cached2 = turn2["usage"]["input_tokens_details"]["cached_tokens"];
  EXPECT_GT(cached2, cached1) << turn2;
  EXPECT_GE(cached2, turn1["usage"]["input_tokens"].get<int>() - 16) << turn2;
  EXPECT_EQ(j["retrieved"]["id"], j["turns"][0]["id"]);
  EXPECT_EQ(output_text(j["retrieved"]), output_text(j["turns"][0]));
  EXPECT_EQ(j["deleted"], true);
  EXPECT_EQ(j["retrieve_deleted"], 404);
  EXPECT_EQ(j["refused"]["status"], 400) << j["refused"];
  EXPECT_NE(j["refused"]["message"].get<std::string>().find("web_search_preview"), std::string::npos) << j["refused"];
}

TEST(OpenAiResponses, StoreFalseKeepsNothingAndAnUnknownPreviousIdIsA404) {
  test::ServerProcess server({"-m", test::shared_path("models/stories260K.gguf"), "--chat-template-file",
                              test::shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"), "-t", "1"});
  ASSERT_GT(server.port(), 0);
  httplib::Client c("127.0.0.1", server.port());
  c.set_read_timeout(60);
  const Json ask = {{"input", "Hello"}, {"max_output_tokens", 4}, {"store", false}};
  auto r = c.Post("/v1/responses", ask.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const std::string id = Json::parse(r->body)["id"];
  auto got = c.Get("/v1/responses/" + id);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->status, 404) << got->body;
  const Json follow = {{"input", "Hello"}, {"previous_response_id", id}};
  auto refused = c.Post("/v1/responses", follow.dump(), "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 404) << refused->body;
  EXPECT_EQ(Json::parse(refused->body)["error"]["param"], "previous_response_id");
  auto gone = c.Delete("/v1/responses/" + id);
  ASSERT_TRUE(gone);
  EXPECT_EQ(gone->status, 404);
}

// A Responses request on `s`: status and body.
std::pair<int, Json> respond(const test::ServerProcess& s, const Json& body) {
  httplib::Client c("127.0.0.1", s.port());
  c.set_read_timeout(60);
  auto r = c.Post("/v1/responses", body.dump(), "application/json");
  if (!r) return {0, nullptr};
  return {r->status, Json::parse(r->body, nullptr, false)};
}

TEST(OpenAiResponses, ASecondServerSharingTheRedisTierContinuesAStoredConversation) {
  test::RedisServer redis;
  const std::vector<std::string> args = {"-m", test::shared_path("models/stories260K.gguf"), "--chat-template-file",
                                         test::shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"), "-t", "1",
                                         "--kv-redis", redis.url()};
  test::ServerProcess a(args);
  test::ServerProcess b(args);
  ASSERT_GT(a.port(), 0);
  ASSERT_GT(b.port(), 0);
  std::string story = test::read_file(test::shared_path("text/tinystories_sample.txt")).substr(0, 600);
  auto [s1, turn1] = respond(a, {{"input", story}, {"max_output_tokens", 16}, {"temperature", 0}});
  ASSERT_EQ(s1, 200) << turn1;
  // The first turn's KV goes to Redis behind the answer: wait for its blocks.
  const std::string written = R"(kvlm_kv_tier_blocks_written_total{model_name="llama",tier="redis"})";
  const double num_blocks = turn1["usage"]["input_tokens"].get<int>() / 16;
  for (int i = 0; i < 500 && test::server_metric(a, written) < num_blocks; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_GE(test::server_metric(a, written), num_blocks);
  const Json next = {{"input", "And then?"}, {"previous_response_id", turn1["id"]}, {"max_output_tokens", 16},
                     {"temperature", 0}};
  // On the other server: the stored conversation comes from Redis, its
  // prompt's KV from the Redis tier.
  auto [s2, on_b] = respond(b, next);
  ASSERT_EQ(s2, 200) << on_b;
  EXPECT_GT(on_b["usage"]["input_tokens_details"]["cached_tokens"].get<int>(), 0) << on_b;
  // The same conversation on the first server answers the same (greedy).
  auto [s3, on_a] = respond(a, next);
  ASSERT_EQ(s3, 200) << on_a;
  EXPECT_EQ(output_text(on_b), output_text(on_a));
  EXPECT_EQ(on_b["usage"]["input_tokens"], on_a["usage"]["input_tokens"]);
  // b returns a's stored response and deletes one from Redis (a keeps its
  // own copy in memory: a delete reaches the server it is sent to and Redis).
  httplib::Client cb("127.0.0.1", b.port());
  auto got = cb.Get("/v1/responses/" + turn1["id"].get<std::string>());
  ASSERT_TRUE(got);
  EXPECT_EQ(got->status, 200) << got->body;
  auto del = cb.Delete("/v1/responses/" + on_a["id"].get<std::string>());
  ASSERT_TRUE(del);
  EXPECT_EQ(del->status, 200) << del->body;
}

}  // namespace kvlm::openai_responses_test
