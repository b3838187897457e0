// `kvlm bench serve` against a stub server whose answers are known (so the
// parsed counts can be checked exactly) and against a real `kvlm serve`.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace kvlm::bench_serve_test {

using Json = nlohmann::json;

// A tiny OpenAI-style server: every `fail_every`-th request gets a 500; the
// others stream `max_tokens` chunks of text "x" (with a usage chunk unless
// disabled, which says `cached_tokens` where that is not negative) and
// [DONE]. It records the prompts it was sent.
class StubServer {
 public:
  StubServer(int fail_every, bool send_usage, int cached_tokens = -1)
      : fail_every_(fail_every), send_usage_(send_usage), cached_tokens_(cached_tokens) {
    http_.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"object":"list","data":[{"id":"stub-model","object":"model"}]})", "application/json");
    });
    http_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) { complete(req, res); });
    port_ = http_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { http_.listen_after_bind(); });
  }
  ~StubServer() {
    http_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/v1"; }
  std::vector<Json> bodies() const {
    std::lock_guard lock(mu_);
    return bodies_;
  }
  std::vector<std::string> auth_headers() const {
    std::lock_guard lock(mu_);
    return auth_;
  }

 private:
  void complete(const httplib::Request& req, httplib::Response& res) {
    const Json body = Json::parse(req.body);
    int n;
    {
      std::lock_guard lock(mu_);
      bodies_.push_back(body);
      auth_.push_back(req.get_header_value("Authorization"));
      n = static_cast<int>(bodies_.size());
    }
    if (fail_every_ > 0 && n % fail_every_ == 0) {
      res.status = 500;
      res.set_content(R"({"error":{"message":"stub failure","type":"server_error"}})", "application/json");
      return;
    }
    std::string sse;
    const int max_tokens = body["max_tokens"];
    for (int i = 0; i < max_tokens; ++i)
      sse += "data: " + Json{{"choices", {{{"index", 0}, {"text", "x"}, {"finish_reason", nullptr}}}}}.dump() + "\n\n";
    sse += ": keep-alive comment\n\n";
    if (send_usage_) {
      Json usage = {{"prompt_tokens", 11}, {"completion_tokens", max_tokens}};
      if (cached_tokens_ >= 0) usage["prompt_tokens_details"] = {{"cached_tokens", cached_tokens_}};
      sse += "data: " + Json{{"choices", Json::array()}, {"usage", usage}}.dump() + "\n\n";
    }
    sse += "data: [DONE]\n\n";
    res.set_content(sse, "text/event-stream");
  }

  int fail_every_;
  bool send_usage_;
  int cached_tokens_;
  httplib::Server http_;
  int port_ = 0;
  std::thread thread_;
  mutable std::mutex mu_;
  std::vector<Json> bodies_;
  std::vector<std::string> auth_;
};

std::vector<std::string> words_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

TEST(BenchServe, CountsTokensAndErrorsOfAKnownServer) {
  StubServer stub(/*fail_every=*/5, /*send_usage=*/true);
  auto r = test::run_kvlm({"bench", "serve", "--url", stub.url(), "--api-key", "k1", "--requests", "10",
                           "--concurrency", "3", "--prompt-len", "12", "--gen-len", "7", "--shared-prefix", "4", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_EQ(j["model"], "stub-model");
  EXPECT_TRUE(j["tokens_per_word"].is_null());  // the stub has no /tokenize: words are taken as tokens
  ASSERT_EQ(j["runs"].size(), 1u);
  const Json& run = j["runs"][0];
  EXPECT_EQ(run["requests"], 10);
  EXPECT_EQ(run["errors"], 2);  // the stub's 5th and 10th (its 1st is bench serve's warm-up)
  EXPECT_EQ(run["completed"], 8);
  EXPECT_EQ(run["error_messages"]["HTTP 500: stub failure"], 2) << run.dump();
  EXPECT_EQ(run["generated_tokens"], 8 * 7);
  EXPECT_EQ(run["prompt_tokens"], 8 * 11);
  for (const char* k : {"ttft_ms", "itl_ms", "e2e_ms"})
    for (const char* s : {"mean", "p50", "p90", "p99"}) EXPECT_TRUE(run[k].contains(s)) << k << "." << s;
  EXPECT_GT(run["generated_tokens_per_s"].get<double>(), 0);
  EXPECT_LE(run["ttft_ms"]["p50"].get<double>(), run["e2e_ms"]["p50"].get<double>());

  // What the stub was sent: streaming, ignore_eos, 12-word prompts sharing 4 words, the key.
  const auto bodies = stub.bodies();
  ASSERT_EQ(bodies.size(), 11u);
  const auto first = words_of(bodies[0]["prompt"]);
  for (const Json& b : bodies) {
    EXPECT_EQ(b["stream"], true);
    EXPECT_EQ(b["max_tokens"], 7);
    EXPECT_EQ(b["model"], "stub-model");
    EXPECT_EQ(b["stream_options"]["include_usage"], true);
    const auto w = words_of(b["prompt"]);
    ASSERT_EQ(w.size(), 12u);
    EXPECT_TRUE(std::equal(w.begin(), w.begin() + 4, first.begin()));
  }
  for (const auto& h : stub.auth_headers()) EXPECT_EQ(h, "Bearer k1");
}

TEST(BenchServe, CountsChunksWithoutUsageAndSweepsConcurrency) {
  StubServer stub(/*fail_every=*/0, /*send_usage=*/false);
  const std::string dataset = test::write_temp_file("bench-dataset.txt", "alpha beta gamma\n\ndelta epsilon\nzeta\n");
  const std::string png = test::temp_dir() + "/bench-serve-stub.png";
  auto r = test::run_kvlm({"bench", "serve", "--url", stub.url(), "--requests", "4", "--sweep", "1,2,4",
                           "--prompt-len", "4", "--gen-len", "5", "--dataset", dataset, "--plot", png, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  ASSERT_EQ(j["runs"].size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const Json& run = j["runs"][i];
    EXPECT_EQ(run["concurrency"], 1 << i);
    EXPECT_EQ(run["errors"], 0);
    EXPECT_EQ(run["generated_tokens"], 4 * 5);  // 5 text chunks per request, no usage chunk
    EXPECT_EQ(run["prompt_tokens"], 0);
    // Five chunks: four gaps each.
    EXPECT_GE(run["itl_ms"]["p99"].get<double>(), run["itl_ms"]["p50"].get<double>());
  }
  // Prompts are the dataset's words from line i + 1 on, wrapping.
  const auto bodies = stub.bodies();
  ASSERT_EQ(bodies.size(), 13u);  // a warm-up request, then 4 per run
  EXPECT_EQ(bodies[0]["prompt"], "delta epsilon zeta alpha");
  // The PNG exists (gnuplot from scripts/setup.sh).
  ASSERT_TRUE(std::filesystem::exists(png)) << r.err;
  EXPECT_EQ(test::read_file(png).substr(1, 3), "PNG");
}

// Open loop: requests start at Poisson arrival times whatever is running.
TEST(BenchServe, RateStartsRequestsOnTheirOwn) {
  StubServer stub(/*fail_every=*/0, /*send_usage=*/true);
  auto r = test::run_kvlm({"bench", "serve", "--url", stub.url(), "--requests", "6", "--rate", "200", "--prompt-len",
                           "3", "--gen-len", "2", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json run = Json::parse(r.out)["runs"][0];
  EXPECT_TRUE(run["concurrency"].is_null());
  EXPECT_EQ(run["rate"], 200.0);
  EXPECT_EQ(run["completed"], 6);
  EXPECT_EQ(run["generated_tokens"], 12);
  // --rate with --concurrency, or with --plot, is refused.
  r = test::run_kvlm({"bench", "serve", "--url", stub.url(), "--rate", "1", "--concurrency", "2"});
  EXPECT_NE(r.exit_code, 0);
  r = test::run_kvlm({"bench", "serve", "--url", stub.url(), "--rate", "1", "--plot", "x.png"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--plot draws against concurrency"), std::string::npos) << r.err;
}

TEST(BenchServe, UnreachableServerIsAClearError) {
  auto r = test::run_kvlm({"bench", "serve", "--url", "http://127.0.0.1:1", "--requests", "1"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("cannot reach http://127.0.0.1:1"), std::string::npos) << r.err;
}

TEST(BenchServe, DrivesARealKvlmServe) {
  test::ServerProcess server({"-m", test::shared_path("models/stories260K.gguf"), "-t", "1"});
  ASSERT_GT(server.port(), 0);
  auto r = test::run_kvlm({"bench", "serve", "--url", server.url(), "--requests", "4", "--sweep", "1,2",
                           "--prompt-len", "16", "--gen-len", "8", "--shared-prefix", "8", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_EQ(j["model"], "llama");
  ASSERT_EQ(j["runs"].size(), 2u);
  // kvlm counts tokens (POST /tokenize): the words are scaled to about 16 tokens.
  ASSERT_TRUE(j["tokens_per_word"].is_number()) << r.out;
  EXPECT_GT(j["tokens_per_word"].get<double>(), 1.0);  // stories260K's 512-token vocabulary splits words
  EXPECT_LT(j["prompt_words"].get<int>(), 16);
  for (const Json& run : j["runs"]) {
    EXPECT_EQ(run["errors"], 0) << run.dump();
    EXPECT_EQ(run["generated_tokens"], 4 * 8);  // ignore_eos: every request generates it all
    // About 16 tokens each (plus BOS; words differ in length).
    EXPECT_GE(run["prompt_tokens"].get<int>(), 4 * 10) << run.dump();
    EXPECT_LE(run["prompt_tokens"].get<int>(), 4 * 26) << run.dump();
    EXPECT_GT(run["ttft_ms"]["p50"].get<double>(), 0);
  }
  // The text table names every run.
  r = test::run_kvlm({"bench", "serve", "--url", server.url(), "--requests", "2", "--concurrency", "2",
                      "--prompt-len", "8", "--gen-len", "4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("gen tok/s"), std::string::npos) << r.out;
}

// `kvlm bench serve --url URL --workload multi-tenant` and `args`.
test::CommandResult run_multi_tenant(const std::string& url, const std::vector<std::string>& args) {
  std::vector<std::string> all = {"bench", "serve", "--url", url, "--workload", "multi-tenant"};
  all.insert(all.end(), args.begin(), args.end());
  return test::run_kvlm(all);
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// 3 tenants x 2 users x 3 turns against the stub, 4 in flight: every turn is
// sent once, and a follow-up is its previous prompt, the answer and a new
// message, sent only after the previous turn ended.
TEST(BenchServe, MultiTenantTurnsExtendTheirHistory) {
  StubServer stub(/*fail_every=*/0, /*send_usage=*/true, /*cached_tokens=*/4);
  auto r = run_multi_tenant(stub.url(), {"--tenants", "3", "--system-len", "6", "--users", "2", "--turns", "3",
                                          "--user-len", "4", "--gen-len", "2", "--concurrency", "4", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_EQ(j["workload"], "multi-tenant");
  EXPECT_EQ(j["system_words"], 6);  // no /tokenize: a word is taken as a token
  EXPECT_EQ(j["last_turn_prompt_len"], 6 + 3 * 4 + 2 * 2);
  ASSERT_EQ(j["runs"].size(), 1u);
  const Json& run = j["runs"][0];
  EXPECT_EQ(run["requests"], 18);
  EXPECT_EQ(run["completed"], 18);
  EXPECT_EQ(run["concurrency"], 4);
  EXPECT_EQ(run["prompt_tokens"], 18 * 11);
  EXPECT_EQ(run["cached_tokens"], 18 * 4);
  EXPECT_DOUBLE_EQ(run["prefix_hit_ratio"].get<double>(), 4.0 / 11);
  EXPECT_EQ(run["first_turns"]["completed"], 6);
  EXPECT_EQ(run["first_turns"]["cached_tokens"], 6 * 4);
  EXPECT_EQ(run["follow_up_turns"]["completed"], 12);

  const auto bodies = stub.bodies();
  ASSERT_EQ(bodies.size(), 19u);  // the warm-up, then every turn
  std::map<std::string, int> num_per_system_text;
  std::vector<std::string> sent;
  for (size_t i = 1; i < bodies.size(); ++i) {
    const std::string prompt = bodies[i]["prompt"];
    const auto lines = lines_of(prompt);
    ASSERT_GE(lines.size(), 2u) << prompt;
    ASSERT_LE(lines.size(), 4u) << prompt;
    EXPECT_EQ(words_of(lines[0]).size(), 6u) << prompt;
    EXPECT_EQ(words_of(lines.back()).size(), 4u) << prompt;
    ++num_per_system_text[lines[0]];
    if (lines.size() > 2) {
      // Turn k + 1 begins with turn k's prompt and its answer, sent before it.
      const std::string history = prompt.substr(0, prompt.rfind('\n'));
      ASSERT_EQ(history.substr(history.size() - 2), "xx") << prompt;
      EXPECT_NE(std::find(sent.begin(), sent.end(), history.substr(0, history.size() - 2)), sent.end()) << prompt;
    }
    sent.push_back(prompt);
  }
  EXPECT_EQ(std::set<std::string>(sent.begin(), sent.end()).size(), 18u);
  ASSERT_EQ(num_per_system_text.size(), 3u);
  for (const auto& [text, n] : num_per_system_text) EXPECT_EQ(n, 2 * 3) << text;
}

// One request at a time, so the stub sees the seeded order: first turns of
// different tenants interleave rather than come tenant by tenant.
TEST(BenchServe, MultiTenantInterleavesTenants) {
  StubServer stub(/*fail_every=*/0, /*send_usage=*/true);
  auto r = run_multi_tenant(stub.url(), {"--tenants", "4", "--system-len", "5", "--users", "4", "--turns", "1",
                                          "--gen-len", "1", "--concurrency", "1", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json run = Json::parse(r.out)["runs"][0];
  EXPECT_EQ(run["completed"], 16);
  EXPECT_TRUE(run["cached_tokens"].is_null());  // the stub does not say
  EXPECT_TRUE(run["prefix_hit_ratio"].is_null());
  const auto bodies = stub.bodies();
  ASSERT_EQ(bodies.size(), 17u);
  int num_switches = 0;
  for (size_t i = 2; i < bodies.size(); ++i)
    num_switches += lines_of(bodies[i]["prompt"])[0] != lines_of(bodies[i - 1]["prompt"])[0];
  EXPECT_GT(num_switches, 3);  // tenant by tenant would switch 3 times
}

// A failed turn does not stall its conversation: the follow-up is still sent.
TEST(BenchServe, MultiTenantGoesOnAfterAFailedTurn) {
  StubServer stub(/*fail_every=*/3, /*send_usage=*/true);
  auto r = run_multi_tenant(stub.url(), {"--tenants", "1", "--system-len", "3", "--users", "2", "--turns", "2",
                                          "--gen-len", "1", "--concurrency", "2", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json run = Json::parse(r.out)["runs"][0];
  EXPECT_EQ(run["requests"], 4);
  EXPECT_EQ(run["errors"], 1);  // the stub's 3rd (its 1st is the warm-up)
  EXPECT_EQ(stub.bodies().size(), 5u);
}

TEST(BenchServe, MultiTenantFlagsAreChecked) {
  // Checked before the server is asked anything: no server needed.
  const std::string url = "http://127.0.0.1:1";
  const auto with = [&](const std::vector<std::string>& args) { return run_multi_tenant(url, args); };
  auto r = test::run_kvlm({"bench", "serve", "--url", url, "--tenants", "2"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--tenants needs --workload multi-tenant"), std::string::npos) << r.err;
  r = with({"--tenants", "2", "--users", "2"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("needs --tenants, --system-len and --users"), std::string::npos) << r.err;
  r = with({"--tenants", "2", "--users", "0", "--system-len", "8"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--users, --turns and --user-len must be positive"), std::string::npos) << r.err;
  r = with({"--tenants", "2", "--users", "2", "--system-len", "8", "--requests", "5"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--requests is for the single-turn workload"), std::string::npos) << r.err;
  r = test::run_kvlm({"bench", "serve", "--url", url, "--workload", "chat"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--workload"), std::string::npos) << r.err;
}

// A real kvlm serve keeps every tenant's system prompt and every
// conversation's history in its prefix cache: follow-up turns, whose history
// is cached, hit more than first turns; without the cache nothing hits.
TEST(BenchServe, MultiTenantHitsARealPrefixCache) {
  const auto run_against = [](const test::ServerProcess& server, bool json) {
    std::vector<std::string> args = {"--tenants", "2", "--system-len", "64", "--users", "2", "--turns", "2",
                                     "--user-len", "16", "--gen-len", "8", "--concurrency", "2"};
    if (json) args.push_back("--json");
    return run_multi_tenant(server.url(), args);
  };
  {
    test::ServerProcess server({"-m", test::shared_path("models/stories260K.gguf"), "-t", "1"});
    ASSERT_GT(server.port(), 0);
    const auto r = run_against(server, true);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const Json j = Json::parse(r.out);
    // About 64 + 2 * 16 + 8 tokens at the last turn, well inside stories260K's 512.
    EXPECT_LT(j["last_turn_prompt_len"].get<int>(), 200);
    const Json& run = j["runs"][0];
    EXPECT_EQ(run["requests"], 2 * 2 * 2);
    EXPECT_EQ(run["errors"], 0) << run.dump();
    EXPECT_EQ(run["generated_tokens"], 8 * 8);
    EXPECT_EQ(run["first_turns"]["completed"], 4);
    EXPECT_EQ(run["follow_up_turns"]["completed"], 4);
    ASSERT_TRUE(run["prefix_hit_ratio"].is_number()) << run.dump();
    EXPECT_GT(run["prefix_hit_ratio"].get<double>(), 0) << run.dump();
    EXPECT_LE(run["cached_tokens"].get<int64_t>(), run["prompt_tokens"].get<int64_t>());
    EXPECT_GT(run["follow_up_turns"]["prefix_hit_ratio"].get<double>(),
              run["first_turns"]["prefix_hit_ratio"].get<double>())
        << run.dump();
  }
  test::ServerProcess server({"-m", test::shared_path("models/stories260K.gguf"), "-t", "1", "--no-prefix-cache"});
  ASSERT_GT(server.port(), 0);
  auto r = run_against(server, true);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json run = Json::parse(r.out)["runs"][0];
  EXPECT_EQ(run["errors"], 0) << run.dump();
  EXPECT_GT(run["prompt_tokens"].get<int64_t>(), 0);
  EXPECT_EQ(run["cached_tokens"], 0) << run.dump();
  EXPECT_EQ(run["prefix_hit_ratio"], 0.0) << run.dump();
  // The text report says the ratio on a line of its own.
  r = run_against(server, false);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("prefix cache hit ratio 0.000: 0 of "), std::string::npos) << r.out;
}

}  // namespace kvlm::bench_serve_test
