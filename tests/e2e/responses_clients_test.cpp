// OpenAI's Responses API and Anthropic's routes as real clients drive them:
// the Vercel AI SDK's chat, whose later turns send the earlier
// answers back as item_reference input items, answers its third turn as the
// same conversation sent as plain messages does; an item the token limit cut
// says so (a message and a function call, whole, streamed and in the final
// event); a response's input items page both ways through the openai
// client (tests/npm/responses_clients.mjs). Item references resolve from a
// Redis another server shares; with API keys a key reads only its own
// responses and items. The @anthropic-ai/sdk client raises its error class
// for each refusal and reads Anthropic's model list
// (tests/npm/anthropic_errors.mjs). stories260K with Qwen2.5's template.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <set>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "support/test_support.h"
#include "unit/kvstore/redis_server.h"

namespace kvlm::responses_clients_test {

using Json = nlohmann::json;

std::vector<std::string> serve_args(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args = {"-m", test::shared_path("models/stories260K.gguf"), "--chat-template-file",
                                   test::shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"), "-t", "1"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// Runs tests/npm/`script` against `url`; its JSON output.
Json run_script(const std::string& script, const std::string& url, const test::ServerProcess& server) {
  EXPECT_TRUE(test::have_program("node")) << "node is required (scripts/setup.sh installs it)";
  const test::CommandResult r =
      test::run_program({"node", std::string(KVLM_SOURCE_DIR) + "/tests/npm/" + script, url});
  EXPECT_EQ(r.exit_code, 0) << r.err << server.err_so_far();
  return Json::parse(r.out, nullptr, false);
}

// What a cut answer says of its items, in the three places: the last item
// (the one the token limit cut) is `type` and incomplete, those before it
// are not.
void expect_cut(const Json& cut, const std::string& type) {
  SCOPED_TRACE(cut.dump());
  EXPECT_EQ(cut["status"], "incomplete");
  EXPECT_EQ(cut["reason"], "max_output_tokens");
  EXPECT_EQ(cut["final_type"], "response.incomplete");
  for (const char* where : {"whole", "done", "final"}) {
    SCOPED_TRACE(where);
    const Json& items = cut[where];
    ASSERT_FALSE(items.empty());
    EXPECT_EQ(items.back()["type"], type);
    EXPECT_EQ(items.back()["status"], "incomplete");
    for (size_t i = 0; i + 1 < items.size(); ++i) EXPECT_NE(items[i]["status"], "incomplete");
  }
}

size_t num_item_references(const Json& input) {
  size_t n = 0;
  for (const Json& item : input) n += item.is_object() && item.value("type", "") == "item_reference";
  return n;
}

TEST(ResponsesClients, AnAiSdkChatCutItemsAndInputItems) {
  ASSERT_TRUE(std::filesystem::exists(std::string(KVLM_SOURCE_DIR) + "/tests/npm/node_modules/@ai-sdk/openai"))
      << "tests/npm/node_modules/@ai-sdk/openai is missing: run npm ci --prefix tests/npm";
  test::ServerProcess server(serve_args());
  ASSERT_GT(server.port(), 0);
  const Json j = run_script("responses_clients.mjs", server.url(), server);
  ASSERT_TRUE(j.is_object());
  // The AI SDK sent its earlier answers back as references: one, then two.
  const Json& sdk = j["ai_sdk"];
  ASSERT_EQ(sdk["inputs"].size(), 3u) << sdk;
  EXPECT_EQ(num_item_references(sdk["inputs"][0]), 0u) << sdk;
  EXPECT_EQ(num_item_references(sdk["inputs"][1]), 1u) << sdk;
  EXPECT_EQ(num_item_references(sdk["inputs"][2]), 2u) << sdk;
  for (const Json& text : sdk["texts"]) EXPECT_FALSE(text.get<std::string>().empty()) << sdk;
  // Greedy: the third turn is what the same conversation as plain messages gets.
  EXPECT_EQ(sdk["texts"][2], j["plain_third"]) << sdk;

  expect_cut(j["cut_message"], "message");
  expect_cut(j["cut_call"], "function_call");

  // Five input items, two a page: three pages each way, one order the other's reverse.
  const Json& asc = j["input_items"]["asc"];
  const Json& desc = j["input_items"]["desc"];
  EXPECT_EQ(asc["pages"], 3);
  EXPECT_EQ(desc["pages"], 3);
  ASSERT_EQ(asc["items"].size(), 5u) << asc;
  ASSERT_EQ(desc["items"].size(), 5u) << desc;
  const char* texts[] = {"Turn one.", "Turn two.", "Turn three.", "Turn four.", "Turn five."};
  std::set<std::string> ids;
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(asc["items"][i]["text"], texts[i]);
    EXPECT_EQ(asc["items"][i]["type"], "message");
    EXPECT_EQ(asc["items"][i]["role"], i % 2 ? "assistant" : "user");
    EXPECT_EQ(asc["items"][i], desc["items"][4 - i]);
    ids.insert(asc["items"][i]["id"].get<std::string>());
  }
  EXPECT_EQ(ids.size(), 5u);
}

// POST /v1/responses on `port` (with `key` when not empty): status and body.
std::pair<int, Json> respond(int port, const Json& body, const std::string& key = "") {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60);
  httplib::Headers headers;
  if (!key.empty()) headers.emplace("Authorization", "Bearer " + key);
  auto r = c.Post("/v1/responses", headers, body.dump(), "application/json");
  if (!r) return {0, nullptr};
  return {r->status, Json::parse(r->body, nullptr, false)};
}

std::string message_id(const Json& response) {
  for (const Json& item : response["output"])
    if (item["type"] == "message") return item["id"];
  return "";
}

std::string output_text(const Json& r) {
  std::string out;
  for (const Json& item : r["output"])
    if (item["type"] == "message")
      for (const Json& part : item["content"]) out += part["text"].get<std::string>();
  return out;
}

TEST(ResponsesClients, ItemReferencesResolveFromTheRedisAnotherServerShares) {
  test::RedisServer redis;
  const std::vector<std::string> args = serve_args({"--kv-redis", redis.url()});
  test::ServerProcess a(args);
  test::ServerProcess b(args);
  ASSERT_GT(a.port(), 0);
  ASSERT_GT(b.port(), 0);
  auto [s1, turn1] = respond(a.port(), {{"input", "Once upon a time"}, {"max_output_tokens", 8}, {"temperature", 0}});
  ASSERT_EQ(s1, 200) << turn1;
  const Json next = {{"input", Json::array({Json{{"role", "user"}, {"content", "Once upon a time"}},
                                            Json{{"type", "item_reference"}, {"id", message_id(turn1)}},
                                            Json{{"role", "user"}, {"content", "And then?"}}})},
                     {"max_output_tokens", 8}, {"temperature", 0}, {"store", false}};
  auto [s2, on_b] = respond(b.port(), next);
  ASSERT_EQ(s2, 200) << on_b;
  auto [s3, on_a] = respond(a.port(), next);
  ASSERT_EQ(s3, 200) << on_a;
  EXPECT_EQ(output_text(on_b), output_text(on_a));
  EXPECT_EQ(on_b["usage"]["input_tokens"], on_a["usage"]["input_tokens"]);
  // An id no response holds is a 404 that names it.
  Json unknown = next;
  unknown["input"][1]["id"] = "msg_0000";
  auto [s4, refused] = respond(b.port(), unknown);
  EXPECT_EQ(s4, 404) << refused;
  EXPECT_EQ(refused["error"]["type"], "invalid_request_error") << refused;
  EXPECT_EQ(refused["error"]["param"], "input[1].id") << refused;
  EXPECT_NE(refused["error"]["message"].get<std::string>().find("msg_0000"), std::string::npos) << refused;
}

// GET `path` on `port` with `key`: the status.
int get_status(int port, const std::string& path, const std::string& key) {
  httplib::Client c("127.0.0.1", port);
  auto r = c.Get(path, httplib::Headers{{"Authorization", "Bearer " + key}});
  return r ? r->status : 0;
}

TEST(ResponsesClients, AKeyReadsOnlyTheResponsesAndItemsStoredUnderIt) {
  const std::string keys = test::write_temp_file("responses_keys.txt", "sk-a name=team-a\nsk-b name=team-b\n");
  test::ServerProcess server(serve_args({"--api-key-file", keys}));
  ASSERT_GT(server.port(), 0);
  auto [s, mine] = respond(server.port(), {{"input", "Once upon a time"}, {"max_output_tokens", 4}}, "sk-a");
  ASSERT_EQ(s, 200) << mine;
  const std::string id = mine["id"];
  EXPECT_EQ(get_status(server.port(), "/v1/responses/" + id, "sk-a"), 200);
  EXPECT_EQ(get_status(server.port(), "/v1/responses/" + id + "/input_items", "sk-a"), 200);
  EXPECT_EQ(get_status(server.port(), "/v1/responses/" + id, "sk-b"), 404);
  EXPECT_EQ(get_status(server.port(), "/v1/responses/" + id + "/input_items", "sk-b"), 404);
  const Json reference = {{"input", Json::array({Json{{"role", "user"}, {"content", "Once upon a time"}},
                                                 Json{{"type", "item_reference"}, {"id", message_id(mine)}}})},
                          {"max_output_tokens", 4}};
  EXPECT_EQ(respond(server.port(), reference, "sk-b").first, 404);
  EXPECT_EQ(respond(server.port(), reference, "sk-a").first, 200);
  const Json follow = {{"input", "And then?"}, {"previous_response_id", id}, {"max_output_tokens", 4}};
  EXPECT_EQ(respond(server.port(), follow, "sk-b").first, 404);
  EXPECT_EQ(respond(server.port(), follow, "sk-a").first, 200);
  httplib::Client c("127.0.0.1", server.port());
  auto del = c.Delete("/v1/responses/" + id, httplib::Headers{{"Authorization", "Bearer sk-b"}});
  ASSERT_TRUE(del);
  EXPECT_EQ(del->status, 404);
  EXPECT_EQ(get_status(server.port(), "/v1/responses/" + id, "sk-a"), 200) << "another key's delete left it";
}

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~ScopedEnv() { ::unsetenv(name_); }

 private:
  const char* name_;
};

void expect_raised(const Json& r, const char* cls, int status, const char* type) {
  SCOPED_TRACE(r.dump());
  EXPECT_EQ(r["class"], cls);
  EXPECT_EQ(r["status"], status);
  EXPECT_EQ(r["type"], type);
  EXPECT_EQ(r["envelope"], "error");
}

TEST(AnthropicClients, EachRefusalRaisesItsSdkClassAndTheModelListIsAnthropics) {
  ASSERT_TRUE(std::filesystem::exists(std::string(KVLM_SOURCE_DIR) + "/tests/npm/node_modules/@anthropic-ai/sdk"))
      << "tests/npm/node_modules/@anthropic-ai/sdk is missing: run npm ci --prefix tests/npm";
  const std::string keys =
      test::write_temp_file("anthropic_keys.txt", "sk-main name=main\nsk-limited name=limited rpm=1\n");
  const ScopedEnv slow("KVLM_FAULT", "kind=delay,ms=30");  // a 200-token stream holds the sequence for 6 s
  test::ServerProcess server(serve_args({"--served-model-name", "kvlm", "--api-key-file", keys, "--max-seqs", "1",
                                         "--max-queued-requests", "0"}));
  ASSERT_GT(server.port(), 0);
  const Json j = run_script("anthropic_errors.mjs", server.url(), server);
  ASSERT_TRUE(j.is_object());
  expect_raised(j["not_found_route"], "NotFoundError", 404, "not_found_error");
  expect_raised(j["not_found_model"], "NotFoundError", 404, "not_found_error");
  expect_raised(j["bad_request"], "BadRequestError", 400, "invalid_request_error");
  expect_raised(j["authentication"], "AuthenticationError", 401, "authentication_error");
  EXPECT_EQ(j["limited_first"]["class"], "ok") << j["limited_first"];
  expect_raised(j["rate_limit"], "RateLimitError", 429, "rate_limit_error");
  expect_raised(j["overloaded"], "OverloadedError", 529, "overloaded_error");
  ASSERT_EQ(j["models"].size(), 1u) << j["models"];
  EXPECT_EQ(j["models"][0]["type"], "model");
  EXPECT_EQ(j["models"][0]["id"], "kvlm");
  EXPECT_EQ(j["models"][0]["display_name"], "kvlm");
  EXPECT_EQ(j["models"][0]["created_at"].get<std::string>().size(), 20u) << j["models"];  // 2025-01-01T00:00:00Z
  EXPECT_EQ(j["model"], j["models"][0]);
  expect_raised(j["model_missing"], "NotFoundError", 404, "not_found_error");

  // OpenAI's clients see OpenAI's list and errors, as before.
  httplib::Client c("127.0.0.1", server.port());
  const httplib::Headers key = {{"Authorization", "Bearer sk-main"}};
  auto models = c.Get("/v1/models", key);
  ASSERT_TRUE(models);
  EXPECT_EQ(Json::parse(models->body)["object"], "list") << models->body;
  auto missing = c.Get("/v1/responses/resp_nope", key);
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_TRUE(Json::parse(missing->body)["error"].contains("code")) << missing->body;
}

}  // namespace kvlm::responses_clients_test
