// The server's limits over real HTTP (docs/server.md "Server limits"): each cap is
// actually reached — connections held open, requests kept running by an
// injected per-token delay (KVLM_FAULT) — and answered 503 with Retry-After
// and an OpenAI error, counted in /metrics; the per-request time limit ends
// a request with a clear error and frees its KV; a body over the cap gets 413.
// Faults injected into one request among several leave the others' output
// unchanged.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "support/raw_socket.h"
#include "support/test_support.h"

namespace kvlm::limits_test {

using Json = nlohmann::json;

std::string model() { return test::shared_path("models/stories260K.gguf"); }

// Sets an environment variable for the servers started in its lifetime.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~ScopedEnv() { ::unsetenv(name_); }

 private:
  const char* name_;
};

std::string completion(const std::string& prompt, int max_tokens, bool stream) {
  return Json{{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true}, {"stream", stream}}
      .dump();
}

// Polls until `done` holds (up to 20 s); whether it did.
template <typename Pred>
bool eventually(Pred done) {
  for (int i = 0; i < 2000; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// What a test needs of an HTTP answer (httplib::Result cannot be stored empty).
struct Answer {
  int status = -1;  // -1: no answer
  std::string retry_after;
  std::string body;
};

Answer answer(const httplib::Result& r) {
  if (!r) return {};
  return {r->status, r->get_header_value("Retry-After"), r->body};
}

// The 503 of a limit: Retry-After and an OpenAI error with `code`.
void expect_overloaded(const Answer& r, const std::string& code) {
  ASSERT_EQ(r.status, 503) << r.body;
  EXPECT_EQ(r.retry_after, "1");
  const Json body = Json::parse(r.body);
  EXPECT_EQ(body["error"]["code"], code) << r.body;
  EXPECT_EQ(body["error"]["type"], "server_error");
  EXPECT_FALSE(body["error"]["message"].get<std::string>().empty());
}

void expect_idle(const test::ServerProcess& server) {
  EXPECT_TRUE(eventually([&] {
    const std::string m = test::metrics_text(server);
    return test::metric_sample(m, "kvlm_kv_blocks_used") == 0 && test::metric_sample(m, "kvlm_requests_running") == 0 &&
           test::metric_sample(m, "kvlm_requests_waiting") == 0;
  })) << test::metrics_text(server);
}

double rejected(const test::ServerProcess& server, const std::string& limit) {
  return test::server_metric(server, "kvlm_server_rejected_total{model_name=\"m\",limit=\"" + limit + "\"}");
}

TEST(ServerLimits, ConnectionsPastTheCapGet503) {
  test::ServerProcess server({"-m", model(), "-t", "1", "--served-model-name", "m", "--max-connections", "2"});
  // Two connections that send nothing hold both places.
  const int a = test::connect_socket(server.port()), b = test::connect_socket(server.port());
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  httplib::Client cli("127.0.0.1", server.port());
  Answer refused;
  // The server accepts the two on its own thread: ask until it has.
  EXPECT_TRUE(eventually([&] {
    refused = answer(cli.Get("/health"));
    return refused.status == 503;
  }));
  expect_overloaded(refused, "too_many_connections");
  test::close_socket(a);
  test::close_socket(b);
  EXPECT_TRUE(eventually([&] {
    auto r = cli.Get("/health");
    return r && r->status == 200;
  }));
  // The closed sockets may still hold their places for a moment on a slow
  // server (TSan), so /metrics itself may be refused at first: ask until read.
  double connections = -1, queue = -1;
  EXPECT_TRUE(eventually([&] {
    connections = rejected(server, "connections");
    queue = rejected(server, "queue");
    return connections >= 0 && queue >= 0;
  }));
  EXPECT_GE(connections, 1);
  EXPECT_EQ(queue, 0);
}

TEST(ServerLimits, QueuedRequestsPastTheCapGet503) {
  ScopedEnv slow("KVLM_FAULT", "kind=delay,ms=30");  // ~30 ms per token: requests stay running
  test::ServerProcess server({"-m", model(), "-t", "1", "--served-model-name", "m", "--max-seqs", "1",
                              "--max-queued-requests", "1"});
  // One running, one waiting: streams whose clients never read.
  const int a = test::connect_socket(server.port()), b = test::connect_socket(server.port());
  ASSERT_TRUE(test::send_all(a, test::raw_post("/v1/completions", completion("Once upon", 300, true))));
  ASSERT_TRUE(test::send_all(b, test::raw_post("/v1/completions", completion("The cat", 300, true))));
  ASSERT_TRUE(eventually([&] {
    const std::string m = test::metrics_text(server);
    return test::metric_sample(m, "kvlm_requests_running") == 1 && test::metric_sample(m, "kvlm_requests_waiting") == 1;
  })) << test::metrics_text(server);
  httplib::Client cli("127.0.0.1", server.port());
  expect_overloaded(answer(cli.Post("/v1/completions", completion("A dog", 4, false), "application/json")), "queue_full");
  expect_overloaded(answer(cli.Post("/v1/completions", completion("A dog", 4, true), "application/json")), "queue_full");
  EXPECT_EQ(rejected(server, "queue"), 2);
  // Hanging up cancels both; then there is room again.
  test::close_socket(a);
  test::close_socket(b);
  expect_idle(server);
  auto ok = cli.Post("/v1/completions", completion("A dog", 2, false), "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
}

TEST(ServerLimits, RequestTimeoutEndsTheRequestAndFreesItsBlocks) {
  ScopedEnv slow("KVLM_FAULT", "kind=delay,ms=20");  // 400 tokens take 8 s, the limit is 1 s
  test::ServerProcess server({"-m", model(), "-t", "1", "--served-model-name", "m", "--request-timeout", "1"});
  httplib::Client cli("127.0.0.1", server.port());
  cli.set_read_timeout(60);
  auto whole = cli.Post("/v1/completions", completion("Once upon a time", 400, false), "application/json");
  ASSERT_TRUE(whole);
  EXPECT_EQ(whole->status, 503) << whole->body;
  EXPECT_NE(Json::parse(whole->body)["error"]["message"].get<std::string>().find("time limit of 1 s"), std::string::npos)
      << whole->body;

  auto streamed = cli.Post("/v1/completions", completion("Once upon a time", 400, true), "application/json");
  ASSERT_TRUE(streamed);
  EXPECT_EQ(streamed->status, 200);
  const std::vector<std::string> events = test::sse_data(streamed->body);
  ASSERT_GE(events.size(), 2u) << streamed->body;
  EXPECT_EQ(events.back(), "[DONE]");
  const Json last = Json::parse(events[events.size() - 2]);
  ASSERT_TRUE(last.contains("error")) << streamed->body;
  EXPECT_NE(last["error"]["message"].get<std::string>().find("time limit"), std::string::npos);

  EXPECT_EQ(test::server_metric(server, "kvlm_requests_timed_out_total"), 2);
  expect_idle(server);
  // A short request fits the limit.
  auto quick = cli.Post("/v1/completions", completion("Once", 3, false), "application/json");
  ASSERT_TRUE(quick);
  EXPECT_EQ(quick->status, 200) << quick->body;
}

TEST(ServerLimits, BodyPastTheCapGets413) {
  test::ServerProcess server({"-m", model(), "-t", "1", "--max-request-bytes", "2048"});
  httplib::Client cli("127.0.0.1", server.port());
  auto big = cli.Post("/v1/completions", completion(std::string(4000, 'a'), 2, false), "application/json");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 413);
  EXPECT_TRUE(Json::parse(big->body).contains("error")) << big->body;
  auto small = cli.Post("/v1/completions", completion(std::string(1000, 'a'), 2, false), "application/json");
  ASSERT_TRUE(small);
  EXPECT_EQ(small->status, 200) << small->body;
}

TEST(ServerFaults, OneFailedRequestLeavesTheOthersIntact) {
  const std::vector<std::string> prompts = {"Once upon a time", "The little dog", "Lily and Ben", "One day a bird"};
  // Requests 1-4 (one at a time) are the reference; 5-8 run together and 6,
  // whichever prompt it carries, fails at its third token.
  ScopedEnv fault("KVLM_FAULT", "kind=bad_alloc,request=6,at=2");
  test::ServerProcess server({"-m", model(), "-t", "1"});
  httplib::Client cli("127.0.0.1", server.port());
  std::vector<std::string> expected;
  for (const auto& p : prompts) {
    auto r = cli.Post("/v1/completions", completion(p, 24, false), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    expected.push_back(Json::parse(r->body)["choices"][0]["text"]);
  }
  std::vector<Answer> got(prompts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < prompts.size(); ++i)
    threads.emplace_back([&, i] {
      httplib::Client c("127.0.0.1", server.port());
      got[i] = answer(c.Post("/v1/completions", completion(prompts[i], 24, false), "application/json"));
    });
  for (auto& t : threads) t.join();
  int num_failed = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (got[i].status == 500) {
      ++num_failed;
      EXPECT_NE(got[i].body.find("out of memory"), std::string::npos) << got[i].body;
      continue;
    }
    ASSERT_EQ(got[i].status, 200) << got[i].body;
    EXPECT_EQ(Json::parse(got[i].body)["choices"][0]["text"], expected[i]) << prompts[i];
  }
  EXPECT_EQ(num_failed, 1);
  EXPECT_EQ(test::server_metric(server, "kvlm_requests_failed_total"), 1);
  expect_idle(server);
}

}  // namespace kvlm::limits_test
