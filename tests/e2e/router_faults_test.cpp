// kvlm router when workers fail: workers SIGKILLed every second or two
// during 500 requests at 32 concurrent (streams, n = 2, forced tool calls,
// answers whole) cost no request, and every answer equals the answer with
// no kills; a worker frozen with SIGSTOP is taken out (its streams go on
// elsewhere) and comes back after SIGCONT; a draining worker gets nothing new.
#include <gtest/gtest.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <mutex>
#include <random>
#include <thread>

#include "e2e/router_fleet.h"

namespace kvlm::router_faults_test {

using test::Fleet;
using test::Json;

const Json kTools = Json::parse(R"([{"type": "function", "function": {"name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Lima"]}},
                   "required": ["city"], "additionalProperties": false}}}])");

struct Case {
  std::string path;
  Json body;
  bool stream;
};

// Requests of every kind the router resumes or retries, each deterministic
// (greedy, or seeded sampling), on prompts from the shared stories: answers
// whole, streams, n = 2, lists of prompts, forced tool calls, logprobs.
std::vector<Case> cases() {
  const std::string text = test::read_file(test::shared_path("text/tinystories_sample.txt"));
  std::vector<Case> out;
  for (int i = 0; i < 40; ++i) {
    const std::string prompt = text.substr(static_cast<size_t>(i) * 1777 % 200000, 200 + 13 * (i % 7));
    const Json messages = Json::array({Json{{"role", "user"}, {"content", prompt.substr(0, 80)}}});
    switch (i % 6) {
      case 5:  // a list of prompts, two choices each, seeded
        out.push_back({"/v1/completions", {{"prompt", {prompt.substr(0, 120), prompt.substr(120)}}, {"max_tokens", 100},
                                           {"temperature", 0.9}, {"seed", i}, {"n", 2}, {"ignore_eos", true},
                                           {"stream", true}, {"stream_options", {{"include_usage", true}}}},
                       true});
        break;
      case 0:
        out.push_back({"/v1/completions", {{"prompt", prompt}, {"max_tokens", 64}, {"temperature", 0},
                                           {"ignore_eos", true}}, false});
        break;
      case 1:
        out.push_back({"/v1/completions", {{"prompt", prompt}, {"max_tokens", 160}, {"temperature", 0},
                                           {"ignore_eos", true}, {"stream", true}}, true});
        break;
      case 2:
        out.push_back({"/v1/completions", {{"prompt", prompt}, {"max_tokens", 120}, {"temperature", 0.8}, {"seed", i},
                                           {"n", 2}, {"stream", true}, {"stream_options", {{"include_usage", true}}}},
                       true});
        break;
      case 3:
        out.push_back({"/v1/chat/completions", {{"messages", messages}, {"tools", kTools}, {"tool_choice", "required"},
                                                {"parallel_tool_calls", false}, {"temperature", 0.7}, {"seed", i},
                                                {"max_tokens", 200}, {"stream", true}}, true});
        break;
      default:
        out.push_back({"/v1/chat/completions", {{"messages", messages}, {"max_tokens", 100}, {"temperature", 0},
                                                {"stream", true}, {"logprobs", true}}, true});
    }
  }
  return out;
}

Json answer(int port, const Case& c, int* status) {
  if (c.stream) return test::visible_stream(test::http_stream(port, c.path, c.body, status));
  const test::HttpAnswer a = test::http_post(port, c.path, c.body);
  *status = a.status;
  return test::visible_answer(a.json());
}

// Sends `num_requests` of `cases` (in turn) at `concurrency` through the
// router and checks each against `want`; returns how many failed or differed.
int run_load(int port, const std::vector<Case>& cs, const std::vector<Json>& want, int num_requests, int concurrency) {
  std::atomic<int> next{0}, num_bad{0};
  std::mutex report_mu;
  std::vector<std::thread> clients;
  for (int t = 0; t < concurrency; ++t) {
    clients.emplace_back([&] {
      for (int i; (i = next++) < num_requests;) {
        const size_t k = static_cast<size_t>(i) % cs.size();
        int status = 0;
        const Json got = answer(port, cs[k], &status);
        if (status == 200 && got == want[k]) continue;
        ++num_bad;
        std::lock_guard lock(report_mu);
        ADD_FAILURE() << "request " << i << " (" << cs[k].body.dump() << "): status " << status << "\ngot:  "
                      << got.dump() << "\nwant: " << want[k].dump();
      }
    });
  }
  for (auto& c : clients) c.join();
  return num_bad;
}

TEST(RouterFaults, WorkersKilledEverySecondOrTwoCostNoRequest) {
  Fleet fleet({.router_args = {"--health-interval-ms", "200", "--health-timeout-ms", "1000", "--max-attempts", "4"}});
  const std::vector<Case> cs = cases();
  std::vector<Json> want;
  for (const Case& c : cs) {  // the answers with no kills, from one worker directly
    int status = 0;
    want.push_back(answer(fleet.worker_port(0), c, &status));
    ASSERT_EQ(status, 200) << c.body.dump();
  }
  std::atomic<bool> done{false};
  std::atomic<int> num_kills{0};
  std::thread killer([&] {
    std::mt19937 rng(42);
    while (!done) {
      std::this_thread::sleep_for(std::chrono::milliseconds(700 + rng() % 900));
      if (done) break;
      const size_t victim = rng() % fleet.num_workers();
      fleet.kill_worker(victim);
      ++num_kills;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      fleet.restart_worker(victim);
    }
  });
  // 500 requests, and more in rounds of 100 until three kills have landed
  // during the load (a fast machine answers 500 before the third).
  int num_bad = run_load(fleet.router_port(), cs, want, 500, 32);
  for (int round = 0; round < 50 && num_kills < 3; ++round) num_bad += run_load(fleet.router_port(), cs, want, 100, 32);
  done = true;
  killer.join();
  EXPECT_EQ(num_bad, 0);
  EXPECT_GE(num_kills.load(), 3) << "the load ended before the kills could matter";
  const std::string metrics = test::metrics_text(fleet.router());
  std::printf("kills %d, resumed streams %.0f, retries %.0f\n", num_kills.load(),
              test::metric_sample(metrics, "kvlm_router_resumed_streams_total"),
              test::metric_sample(metrics, "kvlm_router_retries_total"));
  EXPECT_GT(test::metric_sample(metrics, "kvlm_router_resumed_streams_total"), 0) << metrics;
  EXPECT_EQ(test::metric_sample(metrics, "kvlm_router_resume_failures_total"), 0);
}

// The router's view of one worker in /v1/status.
Json worker_status(Fleet& fleet, size_t i) {
  const Json status = test::http_get(fleet.router_port(), "/v1/status").json();
  for (const Json& w : status["workers"])
    if (w["url"] == fleet.worker_url(i)) return w;
  return nullptr;
}

bool wait_for_state(Fleet& fleet, size_t i, const std::string& state) {
  for (int k = 0; k < 300; ++k) {
    if (worker_status(fleet, i)["state"] == state) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

TEST(RouterFaults, AFrozenWorkerIsTakenOutAndItsStreamsGoOnElsewhere) {
  // Round-robin: kv-aware would send every copy of the stream to the worker
  // that computed the reference answer, leaving nothing on worker 0.
  Fleet fleet({.num_workers = 2,
               .router_args = {"--health-interval-ms", "200", "--health-timeout-ms", "500", "--policy", "round-robin"}});
  const Case long_stream{"/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 1500}, {"temperature", 0},
                                             {"ignore_eos", true}, {"stream", true}}, true};
  int status = 0;
  const Json want = answer(fleet.worker_port(1), long_stream, &status);
  // Streams on both workers, then worker 0 freezes in the middle of them.
  std::vector<std::thread> streams;
  std::atomic<int> num_equal{0};
  for (int k = 0; k < 4; ++k)
    streams.emplace_back([&] {
      int s = 0;
      if (answer(fleet.router_port(), long_stream, &s) == want && s == 200) ++num_equal;
    });
  for (int k = 0; k < 500 && worker_status(fleet, 0)["requests_in_flight"] == 0; ++k)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_GT(worker_status(fleet, 0)["requests_in_flight"], 0) << "nothing on worker 0 to freeze";
  fleet.worker(0).send_signal(SIGSTOP);
  ASSERT_TRUE(wait_for_state(fleet, 0, "down"));
  // New requests meanwhile all go to worker 1.
  const Case short_one{"/v1/completions", {{"prompt", "A cat"}, {"max_tokens", 8}, {"temperature", 0}}, false};
  const Json short_want = answer(fleet.worker_port(1), short_one, &status);
  for (int k = 0; k < 10; ++k) EXPECT_EQ(answer(fleet.router_port(), short_one, &status), short_want);
  for (auto& t : streams) t.join();
  EXPECT_EQ(num_equal, 4) << "every stream, frozen or not, ends as it would have";
  fleet.worker(0).send_signal(SIGCONT);
  EXPECT_TRUE(wait_for_state(fleet, 0, "up")) << "back after SIGCONT";
}

TEST(RouterFaults, ADrainingWorkerGetsNothingNew) {
  Fleet fleet({.num_workers = 2, .router_args = {"--health-interval-ms", "200", "--policy", "round-robin"}});
  // A long request keeps worker 0 draining for a while after SIGTERM.
  std::thread hold([&] {
    int s = 0;
    answer(fleet.worker_port(0), {"/v1/completions", {{"prompt", "Once"}, {"max_tokens", 1500}, {"temperature", 0},
                                                      {"ignore_eos", true}, {"stream", true}}, true}, &s);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  fleet.worker(0).send_signal(SIGTERM);
  ASSERT_TRUE(wait_for_state(fleet, 0, "draining"));
  const double before = test::metric_sample(test::metrics_text(fleet.router()),
                                            "kvlm_router_requests_total{worker=\"" + fleet.worker_url(0) + "\",reason=\"round-robin\"}");
  int status = 0;
  for (int k = 0; k < 10; ++k) {
    answer(fleet.router_port(), {"/v1/completions", {{"prompt", "Hi"}, {"max_tokens", 2}}, false}, &status);
    EXPECT_EQ(status, 200);
  }
  const double after = test::metric_sample(test::metrics_text(fleet.router()),
                                           "kvlm_router_requests_total{worker=\"" + fleet.worker_url(0) + "\",reason=\"round-robin\"}");
  EXPECT_EQ(after, before);
  hold.join();
}

}  // namespace kvlm::router_faults_test
