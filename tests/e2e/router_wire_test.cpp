// Anthropic Messages and OpenAI Responses through kvlm router: a Messages
// answer, whole and streamed, is what a worker answers; a stored Response
// is found again through the router whichever worker the policy would
// pick (GET, a follow-up by previous_response_id from its cached KV,
// DELETE), because the router sends its id back to the worker that
// stored it.
#include <gtest/gtest.h>

#include <httplib.h>

#include "e2e/router_fleet.h"

namespace kvlm {
namespace {

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

}  // namespace
}  // namespace kvlm
