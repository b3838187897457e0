// kvlm router over three kvlm serve workers on loopback: every endpoint
// through the router answers what the same request sent to a worker
// answers; kv-aware routing sends a prompt back to the worker that holds
// its blocks and predicts the cached tokens the worker reports; the
// router's own status, health and metrics (promtool) hold.
#include <gtest/gtest.h>

#include <set>
#include <thread>

#include <httplib.h>

#include "e2e/router_fleet.h"

namespace kvlm::router_test {

using test::Fleet;
using test::Json;

class RouterFleet : public ::testing::Test {
 public:
  static void SetUpTestSuite() { fleet_ = new Fleet({.router_args = {"--cors-origin", "http://app.example"}}); }
  static void TearDownTestSuite() {
    delete fleet_;
    fleet_ = nullptr;
  }
  static int router() { return fleet_->router_port(); }
  static int worker() { return fleet_->worker_port(0); }

  // The same request to the router and to a worker answers the same.
  static void expect_same(const std::string& path, const Json& body) {
    const test::HttpAnswer via = test::http_post(router(), path, body), direct = test::http_post(worker(), path, body);
    ASSERT_EQ(via.status, direct.status) << via.body << "\n" << direct.body;
    EXPECT_EQ(test::visible_answer(via.json()), test::visible_answer(direct.json())) << body.dump();
  }
  static void expect_same_stream(const std::string& path, const Json& body) {
    int via_status = 0, direct_status = 0;
    const auto via = test::http_stream(router(), path, body, &via_status);
    const auto direct = test::http_stream(worker(), path, body, &direct_status);
    ASSERT_EQ(via_status, direct_status);
    EXPECT_EQ(test::visible_stream(via), test::visible_stream(direct)) << body.dump();
    // One stream, one id; no token ids the client did not ask for.
    std::set<std::string> ids;
    for (const Json& c : via) {
      ids.insert(c.value("id", ""));
      for (const Json& ch : c.value("choices", Json::array())) EXPECT_FALSE(ch.contains("token_ids")) << c.dump();
    }
    EXPECT_EQ(ids.size(), 1u);
  }
  static Fleet* fleet_;
};
Fleet* RouterFleet::fleet_ = nullptr;

const Json kTools = Json::parse(R"([{"type": "function", "function": {"name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Lima"]}},
                   "required": ["city"], "additionalProperties": false}}}])");

Json chat(const std::string& text) { return Json::array({Json{{"role", "user"}, {"content", text}}}); }

TEST_F(RouterFleet, CompletionsAnswerAsAWorkerDoes) {
  expect_same("/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 24}, {"temperature", 0}});
  expect_same("/v1/completions", {{"prompt", "The cat"}, {"max_tokens", 16}, {"temperature", 0.9}, {"seed", 3},
                                  {"n", 2}, {"logprobs", 2}, {"echo", true}});
  expect_same("/v1/completions", {{"prompt", {1, 403, 407}}, {"max_tokens", 8}, {"temperature", 0}, {"best_of", 3},
                                  {"seed", 9}, {"stop", "."}});
  expect_same_stream("/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 40}, {"temperature", 0},
                                         {"stream", true}, {"logprobs", 1}});
  expect_same_stream("/v1/completions", {{"prompt", "A bird"}, {"max_tokens", 30}, {"temperature", 0.8}, {"seed", 5},
                                         {"n", 3}, {"stream", true}, {"stream_options", {{"include_usage", true}}}});
  // A list of prompts, n each: choice i*n + k.
  expect_same("/v1/completions", {{"prompt", {"A bird", "The sea"}}, {"max_tokens", 12}, {"temperature", 0}, {"n", 2}});
  expect_same_stream("/v1/completions", {{"prompt", {"A bird", "The sea", "Once"}}, {"max_tokens", 20},
                                         {"temperature", 0.7}, {"seed", 8}, {"n", 2}, {"stream", true},
                                         {"stream_options", {{"include_usage", true}}}});
}

TEST_F(RouterFleet, ChatAndToolsAnswerAsAWorkerDoes) {
  expect_same("/v1/chat/completions", {{"messages", chat("Hi")}, {"max_tokens", 20}, {"temperature", 0}});
  expect_same("/v1/chat/completions", {{"messages", chat("Weather in Paris?")}, {"tools", kTools},
                                       {"tool_choice", "required"}, {"parallel_tool_calls", false},
                                       {"temperature", 0}, {"max_tokens", 200}});
  expect_same_stream("/v1/chat/completions", {{"messages", chat("Tell me a story")}, {"max_tokens", 30},
                                              {"temperature", 0}, {"stream", true}, {"logprobs", true},
                                              {"top_logprobs", 2}});
  expect_same_stream("/v1/chat/completions",
                     {{"messages", chat("Weather in Lima?")}, {"tools", kTools},
                      {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}},
                      {"parallel_tool_calls", false}, {"temperature", 0.7}, {"seed", 11}, {"max_tokens", 200},
                      {"stream", true}, {"stream_options", {{"include_usage", true}}}});
}

TEST_F(RouterFleet, ErrorsAndTheSmallRoutesAnswerAsAWorkerDoes) {
  expect_same("/v1/completions", {{"prompt", "x"}, {"temperature", 7}});                    // 400 naming the field
  expect_same("/v1/chat/completions", {{"messages", "nope"}});                              // 400
  expect_same("/v1/completions", {{"prompt", "x"}, {"max_tokens", 100000}});                // past the context
  expect_same("/tokenize", {{"content", "Hello world"}, {"with_pieces", true}});
  expect_same("/detokenize", {{"tokens", {1, 403, 407}}});
  const test::HttpAnswer models = test::http_get(router(), "/v1/models");
  EXPECT_EQ(test::visible_answer(models.json()), test::visible_answer(test::http_get(worker(), "/v1/models").json()));
  // Not JSON: the router's own 400, in the same words as a worker's.
  httplib::Client c("127.0.0.1", router());
  auto via = c.Post("/v1/completions", "{nope", "application/json");
  httplib::Client w("127.0.0.1", worker());
  auto direct = w.Post("/v1/completions", "{nope", "application/json");
  ASSERT_TRUE(via && direct);
  EXPECT_EQ(via->status, 400);
  EXPECT_EQ(via->body, direct->body);
  EXPECT_EQ(c.Get("/v1/nothing")->status, 404);
  EXPECT_EQ(c.Get("/v1/completions")->status, 405);
}

// --body-mem bounds what the router's parsed bodies hold together, as
// kvlm serve's does: a body that alone needs more is 413, naming the flag,
// before any worker is asked (here there is none up).
TEST(RouterLimits, ABodyLargerThanTheBodyMemoryIs413) {
  test::ServerProcess router({"--workers", "http://127.0.0.1:1", "--policy", "least-load", "--body-mem", "1M"},
                             "router");
  ASSERT_GT(router.port(), 0);
  std::string big = R"({"prompt": [)";
  for (int i = 0; i < 200000; ++i) big += (i ? ",7" : "7");
  big += "]}";
  httplib::Client c("127.0.0.1", router.port());
  auto r = c.Post("/v1/completions", big, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413) << r->body;
  EXPECT_NE(r->body.find("--body-mem"), std::string::npos) << r->body;
  auto small = c.Post("/v1/completions", R"({"prompt": "x"})", "application/json");
  ASSERT_TRUE(small);
  EXPECT_EQ(small->status, 503) << "past the budget check, no worker is up: " << small->body;
  EXPECT_EQ(c.Get("/health")->status, 503);
}

TEST_F(RouterFleet, APromptGoesBackToTheWorkerHoldingItsBlocks) {
  const std::string story = test::read_file(test::shared_path("text/tinystories_sample.txt")).substr(4000, 900);
  const Json body = {{"prompt", story}, {"max_tokens", 4}, {"temperature", 0}};
  const Json first = test::http_post(router(), "/v1/completions", body).json();
  const int prompt_tokens = first["usage"]["prompt_tokens"];
  // The KV events reach the router within a few milliseconds; allow more.
  Json second;
  for (int i = 0; i < 50; ++i) {
    second = test::http_post(router(), "/v1/completions", body).json();
    if (second["usage"]["prompt_tokens_details"]["cached_tokens"] > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(second["usage"]["prompt_tokens_details"]["cached_tokens"], (prompt_tokens - 1) / 16 * 16);
  const std::string metrics = test::metrics_text(fleet_->router());
  EXPECT_GE(test::metric_sample(metrics, R"(kvlm_router_cache_predictions_total{result="exact"})"), 2);
  EXPECT_GT(test::metric_sample(metrics, "kvlm_router_reported_cached_tokens_total"), 0);
  EXPECT_EQ(test::metric_sample(metrics, "kvlm_router_predicted_cached_tokens_total"),
            test::metric_sample(metrics, "kvlm_router_reported_cached_tokens_total"));
}

// KV chunks (docs/kv-chunks.md): the kv-aware policy counts the chunk blocks
// a worker holds, so documents in a new order behind a new opening (no
// prefix block in common) go back to the worker that computed them, which
// reports them cached (another worker would compute them for the request:
// not cached).
TEST_F(RouterFleet, ReorderedChunksGoBackToTheWorkerHoldingThem) {
  const std::string text = test::read_file(test::shared_path("text/tinystories_sample.txt"));
  const std::string doc1 = text.substr(6000, 500), doc2 = text.substr(7000, 500);
  auto body = [](const std::string& opening, const std::string& a, const std::string& b) {
    const auto n = [](const std::string& s) { return static_cast<int>(s.size()); };  // ASCII: code points
    return Json{{"prompt", opening + a + b + " The end."},
                {"kv_chunks", Json::array({Json::array({n(opening), n(opening) + n(a)}),
                                           Json::array({n(opening) + n(a), n(opening) + n(a) + n(b)})})},
                {"max_tokens", 2},
                {"temperature", 0}};
  };
  auto indexed = [&] {
    int64_t n = 0;
    const Json status = test::http_get(router(), "/v1/status").json();
    for (const Json& w : status["workers"]) n += w["kv_blocks_indexed"].get<int64_t>();
    return n;
  };
  const int64_t before = indexed();
  ASSERT_EQ(test::http_post(router(), "/v1/completions", body("Read these stories. ", doc1, doc2)).status, 200);
  for (int i = 0; i < 100 && indexed() <= before; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  auto predicted = [&] {
    return test::metric_sample(test::metrics_text(fleet_->router()), "kvlm_router_predicted_cached_tokens_total");
  };
  const double predicted_before = predicted();
  const Json second = test::http_post(router(), "/v1/completions", body("Two tales follow. ", doc2, doc1)).json();
  EXPECT_GT(second["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0) << second.dump();
  EXPECT_GT(predicted() - predicted_before, 0) << "the router saw no chunk block";
}

TEST_F(RouterFleet, StatusHealthAndMetricsDescribeTheFleet) {
  const Json status = test::http_get(router(), "/v1/status").json();
  ASSERT_EQ(status["workers"].size(), 3u);
  for (const Json& w : status["workers"]) {
    EXPECT_EQ(w["state"], "up") << w.dump();
    EXPECT_TRUE(w["kv_events"]) << w.dump();
  }
  EXPECT_EQ(status["policy"], "kv-aware");
  EXPECT_EQ(status["kv_block_size"], 16);
  const test::HttpAnswer health = test::http_get(router(), "/health");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.json()["workers_up"], 3);
  // CORS as kvlm serve does it: the preflight, and the header on answers.
  httplib::Client c("127.0.0.1", router());
  auto preflight = c.Options("/v1/chat/completions", {{"Origin", "http://app.example"},
                                                       {"Access-Control-Request-Method", "POST"}});
  ASSERT_TRUE(preflight);
  EXPECT_EQ(preflight->status, 204);
  EXPECT_EQ(preflight->get_header_value("Access-Control-Allow-Origin"), "http://app.example");
  auto models = c.Get("/v1/models", {{"Origin", "http://app.example"}});
  EXPECT_EQ(models->get_header_value("Access-Control-Allow-Origin"), "http://app.example");
  EXPECT_EQ(c.Get("/v1/models", {{"Origin", "http://evil.example"}})->get_header_value("Access-Control-Allow-Origin"),
            "");
  // The page the router serves is the workers' chat page.
  EXPECT_EQ(test::http_get(router(), "/").body, test::http_get(worker(), "/").body);
  if (!test::have_program("promtool")) GTEST_FAIL() << "promtool (Debian's prometheus) is needed";
  const std::string path = test::write_temp_file("router-metrics.txt", test::metrics_text(fleet_->router()));
  const test::CommandResult check = test::run_program({"sh", "-c", "promtool check metrics < " + path});
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
}

}  // namespace kvlm::router_test
