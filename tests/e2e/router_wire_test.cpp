// Anthropic Messages and OpenAI Responses through kvlm router: a Messages
// answer, whole and streamed, is what a worker answers; a stored Response
// is found again through the router whichever worker the policy would
// pick (GET, its input items, a follow-up by previous_response_id from its
// cached KV or by item_reference to one of its items, DELETE), because the
// router sends its id back to the worker that stored it; with the router's
// keys, only the key that stored it reaches it. The router's own errors on
// Anthropic's routes are Anthropic's.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include <httplib.h>

#include "e2e/router_fleet.h"

namespace kvlm::router_wire_test {

using test::Fleet;
using test::Json;

class RouterWire : public ::testing::Test {
 public:
  static void SetUpTestSuite() {
    fleet_ = new Fleet({.worker_args = {"--served-model-name", "kvlm"}, .router_args = {"--policy", "round-robin"}});
  }
  static void TearDownTestSuite() {
    delete fleet_;
    fleet_ = nullptr;
  }
  static Fleet* fleet_;
};
Fleet* RouterWire::fleet_ = nullptr;

// A Messages answer without what differs between servers.
Json visible_message(Json m) {
  m.erase("id");
  if (m.contains("usage")) {  // Anthropic's input_tokens leave out the cached ones
    Json& u = m["usage"];
    u["input_tokens"] = u.value("input_tokens", 0) + u.value("cache_read_input_tokens", 0);
    u.erase("cache_read_input_tokens");
  }
  for (Json& block : m["content"])
    if (block.contains("id")) block.erase("id");
  return m;
}

TEST_F(RouterWire, MessagesAnswerAsAWorkerDoes) {
  const Json body = {{"model", "kvlm"},
                     {"max_tokens", 24},
                     {"temperature", 0},
                     {"system", "You tell short stories."},
                     {"messages", Json::array({{{"role", "user"}, {"content", "Tell me about a cat."}}})}};
  const test::HttpAnswer via = test::http_post(fleet_->router_port(), "/v1/messages", body);
  const test::HttpAnswer direct = test::http_post(fleet_->worker_port(0), "/v1/messages", body);
  ASSERT_EQ(via.status, 200) << via.body;
  ASSERT_EQ(direct.status, 200) << direct.body;
  EXPECT_EQ(visible_message(via.json()), visible_message(direct.json()));
  EXPECT_EQ(via.json()["type"], "message");

  Json streamed = body;
  streamed["stream"] = true;
  int via_status = 0, direct_status = 0;
  const auto via_events = test::http_stream(fleet_->router_port(), "/v1/messages", streamed, &via_status);
  const auto direct_events = test::http_stream(fleet_->worker_port(1), "/v1/messages", streamed, &direct_status);
  ASSERT_EQ(via_status, 200);
  std::string via_text, direct_text;
  std::vector<std::string> via_types, direct_types;
  for (const Json& e : via_events) {
    via_types.push_back(e.value("type", ""));
    if (e.value("type", "") == "content_block_delta") via_text += e["delta"].value("text", "");
  }
  for (const Json& e : direct_events) {
    direct_types.push_back(e.value("type", ""));
    if (e.value("type", "") == "content_block_delta") direct_text += e["delta"].value("text", "");
  }
  EXPECT_EQ(via_types.front(), "message_start");
  EXPECT_EQ(via_types.back(), "message_stop");
  EXPECT_EQ(via_text, direct_text);
  EXPECT_EQ(via_text, via.json()["content"][0]["text"].get<std::string>());

  // A refusal, the worker's and the router's own, in Anthropic's shape.
  const Json bad = {{"model", "kvlm"}, {"max_tokens", 5}};
  const test::HttpAnswer bad_via = test::http_post(fleet_->router_port(), "/v1/messages", bad);
  const test::HttpAnswer bad_direct = test::http_post(fleet_->worker_port(0), "/v1/messages", bad);
  EXPECT_EQ(bad_via.status, 400);
  EXPECT_EQ(bad_via.body, bad_direct.body);
  EXPECT_EQ(bad_via.json()["type"], "error") << bad_via.body;
  httplib::Client c("127.0.0.1", fleet_->router_port());
  auto not_json = c.Post("/v1/messages", "{nope", "application/json");
  ASSERT_TRUE(not_json);
  EXPECT_EQ(not_json->status, 400);
  EXPECT_EQ(test::Json::parse(not_json->body)["type"], "error") << not_json->body;
}

TEST_F(RouterWire, AStoredResponseIsFoundThroughTheRouter) {
  const int router = fleet_->router_port();
  const Json first = {{"model", "kvlm"}, {"input", "Once upon a time there was a little dog named Max."},
                      {"max_output_tokens", 16}, {"temperature", 0}, {"store", true}};
  const test::HttpAnswer a = test::http_post(router, "/v1/responses", first);
  ASSERT_EQ(a.status, 200) << a.body;
  const std::string id = a.json()["id"];
  // Round-robin would send these to every worker in turn; only the owner
  // holds the response.
  for (int k = 0; k < 4; ++k) {
    const test::HttpAnswer got = test::http_get(router, "/v1/responses/" + id);
    ASSERT_EQ(got.status, 200) << got.body;
    EXPECT_EQ(got.json()["id"], id);
  }
  // A follow-up continues on the owner's cached KV, streamed this time.
  const Json second = {{"model", "kvlm"}, {"input", "What did Max do next?"}, {"max_output_tokens", 16},
                       {"temperature", 0}, {"store", true}, {"previous_response_id", id}, {"stream", true}};
  int status = 0;
  const auto events = test::http_stream(router, "/v1/responses", second, &status);
  ASSERT_EQ(status, 200);
  ASSERT_FALSE(events.empty());
  const Json done = events.back();
  ASSERT_TRUE(done.value("type", "") == "response.completed" || done.value("type", "") == "response.incomplete")
      << done.dump();
  EXPECT_GT(done["response"]["usage"]["input_tokens_details"]["cached_tokens"], 0) << done.dump();
  const std::string second_id = done["response"]["id"];
  EXPECT_EQ(test::http_get(router, "/v1/responses/" + second_id).status, 200) << "a streamed Response is found too";
  // DELETE through the router, then it is gone.
  httplib::Client c("127.0.0.1", router);
  auto del = c.Delete("/v1/responses/" + id);
  ASSERT_TRUE(del);
  EXPECT_EQ(del->status, 200) << del->body;
  EXPECT_EQ(test::http_get(router, "/v1/responses/" + id).status, 404);
}

std::string message_id(const Json& response) {
  for (const Json& item : response["output"])
    if (item["type"] == "message") return item["id"];
  return "";
}

// A request whose input refers to the stored message `id` by item_reference.
Json referring_to(const std::string& id) {
  return {{"model", "kvlm"}, {"max_output_tokens", 4}, {"temperature", 0}, {"store", false},
          {"input", Json::array({Json{{"role", "user"}, {"content", "Once upon a time"}},
                                 Json{{"type", "item_reference"}, {"id", id}},
                                 Json{{"role", "user"}, {"content", "And then?"}}})}};
}

TEST_F(RouterWire, ItemReferencesAndInputItemsReachTheWorkerThatStoredThem) {
  const int router = fleet_->router_port();
  const Json ask = {{"model", "kvlm"}, {"input", "Once upon a time"}, {"max_output_tokens", 4}, {"temperature", 0}};
  const test::HttpAnswer whole = test::http_post(router, "/v1/responses", ask);
  ASSERT_EQ(whole.status, 200) << whole.body;
  Json streamed = ask;
  streamed["stream"] = true;
  const auto events = test::http_stream(router, "/v1/responses", streamed);
  ASSERT_FALSE(events.empty());
  // Round-robin would send these to every worker in turn; only the owner
  // holds the item (its id from the whole answer, or from the stream's last event).
  for (const Json& response : {whole.json(), events.back()["response"]}) {
    const std::string id = message_id(response);
    ASSERT_FALSE(id.empty()) << response.dump();
    for (int k = 0; k < 3; ++k) {
      const test::HttpAnswer next = test::http_post(router, "/v1/responses", referring_to(id));
      EXPECT_EQ(next.status, 200) << next.body;
    }
    for (int k = 0; k < 3; ++k) {
      const test::HttpAnswer items = test::http_get(router, "/v1/responses/" + response["id"].get<std::string>() +
                                                                "/input_items?order=asc&limit=5");
      ASSERT_EQ(items.status, 200) << items.body;
      EXPECT_EQ(items.json()["data"].size(), 1u) << items.body;
    }
  }
}

TEST_F(RouterWire, ItsOwnErrorsOnAnthropicsRoutesAreAnthropics) {
  httplib::Client c("127.0.0.1", fleet_->router_port());
  const std::string body = R"({"model": "kvlm", "messages": [{"role": "user", "content": "Hi"}]})";
  auto batches = c.Post("/v1/messages/batches", body, "application/json");
  ASSERT_TRUE(batches);
  EXPECT_EQ(batches->status, 404);
  EXPECT_EQ(Json::parse(batches->body)["error"]["type"], "not_found_error") << batches->body;
  // count_tokens goes to a worker, which counts.
  auto count = c.Post("/v1/messages/count_tokens", body, "application/json");
  ASSERT_TRUE(count);
  EXPECT_EQ(count->status, 200) << count->body;
  EXPECT_GT(Json::parse(count->body)["input_tokens"].get<int>(), 0) << count->body;
  auto get = c.Get("/v1/messages");
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 405);
  EXPECT_EQ(Json::parse(get->body)["type"], "error") << get->body;
  auto models = c.Get("/v1/models", httplib::Headers{{"anthropic-version", "2023-06-01"}});
  ASSERT_TRUE(models);
  ASSERT_EQ(models->status, 200) << models->body;
  EXPECT_EQ(Json::parse(models->body)["data"][0]["type"], "model") << models->body;
  EXPECT_EQ(Json::parse(models->body)["first_id"], "kvlm") << models->body;
}

TEST(RouterKeys, AKeyReachesOnlyTheResponsesAndItemsItStored) {
  Fleet fleet({.num_workers = 1,
               .worker_args = {"--served-model-name", "kvlm"},
               .router_args = {"--api-key", "sk-a", "--api-key", "sk-b"}});
  httplib::Client c("127.0.0.1", fleet.router_port());
  c.set_read_timeout(60);
  const auto post = [&](const Json& body, const std::string& key) {
    return c.Post("/v1/responses", httplib::Headers{{"Authorization", "Bearer " + key}}, body.dump(),
                  "application/json");
  };
  const Json ask = {{"model", "kvlm"}, {"input", "Once upon a time"}, {"max_output_tokens", 4}};
  httplib::Result first = post(ask, "sk-a");
  for (int i = 0; i < 100 && (!first || first->status != 200); ++i) {  // until the router sees its worker
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    first = post(ask, "sk-a");
  }
  ASSERT_TRUE(first);
  ASSERT_EQ(first->status, 200) << first->body;
  const Json mine = Json::parse(first->body);
  const std::string id = mine["id"];
  for (const std::string& path : {"/v1/responses/" + id, "/v1/responses/" + id + "/input_items"}) {
    auto theirs = c.Get(path, httplib::Headers{{"Authorization", "Bearer sk-b"}});
    ASSERT_TRUE(theirs);
    EXPECT_EQ(theirs->status, 404) << path;
    auto own = c.Get(path, httplib::Headers{{"Authorization", "Bearer sk-a"}});
    ASSERT_TRUE(own);
    EXPECT_EQ(own->status, 200) << path;
  }
  auto refused = post(referring_to(message_id(mine)), "sk-b");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 404) << refused->body;
  EXPECT_EQ(Json::parse(refused->body)["error"]["param"], "input[1].id") << refused->body;
  auto follow = post({{"model", "kvlm"}, {"input", "And then?"}, {"previous_response_id", id}}, "sk-b");
  ASSERT_TRUE(follow);
  EXPECT_EQ(follow->status, 404) << follow->body;
}

}  // namespace kvlm::router_wire_test
