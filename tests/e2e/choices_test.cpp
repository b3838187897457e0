// n choices and best_of over real HTTP: each choice equals the single request
// with seed + i, the prompt is computed once (the metrics show the prefix
// cache serving the other choices), and best_of returns the candidates with
// the highest sum of log-probabilities.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <numeric>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace kvlm::choices_test {

using Json = nlohmann::json;

constexpr int64_t kSeed = 1234;

std::vector<std::string> choices_server_args() {
  return {"-m", test::shared_path("models/stories260K.gguf"), "--chat-template-file",
          test::shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"), "-t", "1"};
}

// POSTs a JSON body; returns {status, body}.
std::pair<int, std::string> post(const test::ServerProcess& server, const std::string& path, const Json& body) {
  httplib::Client cli("127.0.0.1", server.port());
  cli.set_read_timeout(std::chrono::seconds(120));
  auto r = cli.Post(path, body.dump(), "application/json");
  EXPECT_TRUE(r) << "no response from " << path;
  if (!r) return {0, ""};
  return {r->status, r->body};
}

Json post_ok(const test::ServerProcess& server, const std::string& path, const Json& body) {
  auto [status, text] = post(server, path, body);
  EXPECT_EQ(status, 200) << text;
  return Json::parse(text);
}

class ChoicesTest : public test::ServerSuite<ChoicesTest> {
 public:
  static std::vector<std::string> server_args() { return choices_server_args(); }
};

Json completion_body(int64_t seed) {
  return Json{{"prompt", "Once upon a time"}, {"max_tokens", 24}, {"temperature", 0.8}, {"seed", seed}};
}

TEST_F(ChoicesTest, EachChoiceEqualsTheSingleRequestWithSeedPlusIndex) {
  Json body = completion_body(kSeed);
  body["n"] = 3;
  const Json j = post_ok(*server_, "/v1/completions", body);
  ASSERT_EQ(j["choices"].size(), 3u) << j;
  int completion_tokens = 0;
  for (int i = 0; i < 3; ++i) {
    const Json single = post_ok(*server_, "/v1/completions", completion_body(kSeed + i));
    EXPECT_EQ(j["choices"][i]["index"], i);
    EXPECT_EQ(j["choices"][i]["text"], single["choices"][0]["text"]) << "choice " << i;
    EXPECT_EQ(j["choices"][i]["finish_reason"], single["choices"][0]["finish_reason"]);
    completion_tokens += single["usage"]["completion_tokens"].get<int>();
  }
  // The choices differ (temperature 0.8): they are not one text three times.
  EXPECT_NE(j["choices"][0]["text"], j["choices"][1]["text"]);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(j["usage"]["completion_tokens"], completion_tokens);
}

TEST_F(ChoicesTest, StreamedChoicesInterleaveAndEqualTheSingleRequests) {
  auto chat_body = [](int64_t seed) {
    return Json{{"messages", Json::array({Json{{"role", "user"}, {"content", "Tell me a story."}}})},
                {"max_tokens", 20}, {"temperature", 0.8}, {"seed", seed}};
  };
  Json body = chat_body(kSeed);
  body["n"] = 3;
  body["stream"] = true;
  body["stream_options"] = Json{{"include_usage", true}};
  auto [status, text] = post(*server_, "/v1/chat/completions", body);
  ASSERT_EQ(status, 200) << text;
  const auto events = test::sse_data(text);
  ASSERT_GE(events.size(), 3u) << text;
  EXPECT_EQ(events.back(), "[DONE]");
  std::vector<std::string> content(3), reason(3);
  std::vector<int> num_roles(3, 0);
  for (size_t e = 0; e + 2 < events.size(); ++e) {
    const Json chunk = Json::parse(events[e]);
    ASSERT_EQ(chunk["choices"].size(), 1u) << chunk;
    const Json& c = chunk["choices"][0];
    const int i = c["index"];
    ASSERT_TRUE(i >= 0 && i < 3) << chunk;
    if (c["delta"].contains("role")) ++num_roles[i];
    content[i] += c["delta"].value("content", "");
    if (!c["finish_reason"].is_null()) reason[i] = c["finish_reason"];
  }
  const Json usage = Json::parse(events[events.size() - 2]);
  int completion_tokens = 0;
  for (int i = 0; i < 3; ++i) {
    const Json single = post_ok(*server_, "/v1/chat/completions", chat_body(kSeed + i));
    EXPECT_EQ(num_roles[i], 1) << "choice " << i;
    EXPECT_EQ(content[i], single["choices"][0]["message"]["content"]) << "choice " << i;
    EXPECT_EQ(reason[i], single["choices"][0]["finish_reason"]) << "choice " << i;
    completion_tokens += single["usage"]["completion_tokens"].get<int>();
  }
  EXPECT_TRUE(usage["choices"].empty()) << usage;
  EXPECT_EQ(usage["usage"]["completion_tokens"], completion_tokens) << usage;
}

TEST_F(ChoicesTest, BestOfReturnsTheCandidatesWithTheHighestSumOfLogprobs) {
  Json body = completion_body(kSeed);
  body["n"] = 2;
  body["best_of"] = 4;
  const Json j = post_ok(*server_, "/v1/completions", body);
  ASSERT_EQ(j["choices"].size(), 2u) << j;
  std::vector<std::pair<double, std::string>> singles;  // (sum of logprobs, text), seed order
  int completion_tokens = 0;
  for (int i = 0; i < 4; ++i) {
    Json b = completion_body(kSeed + i);
    b["logprobs"] = 0;
    const Json single = post_ok(*server_, "/v1/completions", b);
    double sum = 0;
    for (const Json& lp : single["choices"][0]["logprobs"]["token_logprobs"]) sum += lp.get<double>();
    singles.emplace_back(sum, single["choices"][0]["text"]);
    completion_tokens += single["usage"]["completion_tokens"].get<int>();
  }
  std::vector<size_t> order(4);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return singles[a].first > singles[b].first; });
  // The seed makes the pick differ from seed order, so the test sees a ranking.
  EXPECT_NE(std::vector<size_t>(order.begin(), order.begin() + 2), (std::vector<size_t>{0, 1}));
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(j["choices"][i]["index"], i);
    EXPECT_EQ(j["choices"][i]["text"], singles[order[i]].second) << "choice " << i;
    EXPECT_TRUE(j["choices"][i]["logprobs"].is_null()) << "not asked for: " << j;
  }
  // Billed as OpenAI does: every candidate's tokens.
  EXPECT_EQ(j["usage"]["completion_tokens"], completion_tokens);
}

// A fresh server: kvlm_kv_blocks_peak is a high-water mark since start.
TEST(Choices, EightChoicesComputeTheirPromptOnce) {
  test::ServerProcess server(choices_server_args());
  ASSERT_GT(server.port(), 0);
  // About 512 tokens (stories260K: about 2 characters per token).
  const std::string text = test::read_file(test::shared_path("text/tinystories_sample.txt")).substr(0, 1000);
  const double hits_before = test::server_metric(server, "kvlm_prefix_cache_hits_total");
  const Json j = post_ok(server, "/v1/completions",
                         Json{{"prompt", text}, {"max_tokens", 8}, {"temperature", 0.8}, {"seed", kSeed}, {"n", 8}});
  ASSERT_EQ(j["choices"].size(), 8u) << j;
  const int num_prompt = j["usage"]["prompt_tokens"];
  const int num_full_blocks = num_prompt / 16;
  const double hits = test::server_metric(server, "kvlm_prefix_cache_hits_total") - hits_before;
  const double peak = test::server_metric(server, "kvlm_kv_blocks_peak");
  std::cout << "n=8: prompt " << num_prompt << " tokens (" << num_full_blocks << " full blocks), prefix-cache hits "
            << hits << " tokens, kv blocks peak " << peak << "\n";
  EXPECT_EQ(hits, 7.0 * num_full_blocks * 16);
  // Eight separate prompts would hold 8 x (prompt + generated) blocks; the
  // choices hold the prompt's full blocks once and a partial block each.
  const int separate = 8 * ((num_prompt + 8 + 15) / 16);
  EXPECT_LE(peak, num_full_blocks + 8 * 2);
  EXPECT_LT(peak, separate / 4);
}

// Hanging up a stream of 4 choices ends all four and gives every block back.
TEST_F(ChoicesTest, ClientThatHangsUpCancelsEveryChoice) {
  const std::string aborted = "kvlm_requests_finished_total{model_name=\"llama\",finished_reason=\"abort\"}";
  const double aborted_before = std::max(0.0, test::server_metric(*server_, aborted));  // -1: no series yet
  EXPECT_GE(test::stream_then_hang_up(
                *server_, "/v1/completions",
                R"({"prompt":"Once upon a time","max_tokens":1500,"ignore_eos":true,"n":4,"stream":true})", 3),
            3);
  for (int i = 0; i < 500 && (test::server_metric(*server_, "kvlm_requests_running") != 0 ||
                              test::server_metric(*server_, "kvlm_kv_blocks_used") != 0); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(test::server_metric(*server_, "kvlm_requests_running"), 0);
  EXPECT_EQ(test::server_metric(*server_, "kvlm_kv_blocks_used"), 0);
  EXPECT_EQ(test::server_metric(*server_, aborted), aborted_before + 4);
}

// A drain past its deadline cancels every choice of a running request (the
// ticket holds all their ids): the stream ends with [DONE] and no block is
// left. The F32 model generates slowly enough for the drain to catch it.
TEST(Choices, DrainCancelsEveryChoice) {
  test::ServerProcess server({"-m", test::shared_path("models/synth-tiny-F32.gguf"), "-t", "1", "--drain-timeout", "0.05"});
  ASSERT_GT(server.port(), 0);
  std::atomic<bool> started{false};
  std::string body;
  std::thread client([&] {
    httplib::Client cli("127.0.0.1", server.port());
    cli.set_read_timeout(std::chrono::seconds(120));
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.headers = {{"Content-Type", "application/json"}};
    req.body = R"({"prompt":"Once upon a time","max_tokens":500,"ignore_eos":true,"n":3,"stream":true})";
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      body.append(data, n);
      if (body.find("\"index\":2") != std::string::npos) started = true;
      return true;
    };
    cli.send(req);
  });
  for (int i = 0; i < 6000 && !started; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(started);
  const auto t0 = std::chrono::steady_clock::now();
  server.send_signal(SIGTERM);
  const auto r = server.wait();
  client.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(8)) << "the drain waited for its bound";
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("drained (1 requests cancelled); requests left 0, KV blocks in use 0"), std::string::npos) << r.err;
  EXPECT_EQ(test::sse_data(body).back(), "[DONE]");
}

}  // namespace kvlm::choices_test
