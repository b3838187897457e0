// Hostile structured output: 64 concurrent requests whose
// grammars are as costly as clients can make them (large anyOf/oneOf of
// objects, an object with min/maxProperties, a long enum, a repeated regex,
// strict tools), each different so that no cache helps, against a real
// `kvlm serve` with a small grammar budget. Its memory must stay a number
// the operator set: the peak RSS over idle under --grammar-mem plus a
// stated margin, and RSS back within 128 MiB of idle 5 s later. Every
// request gets a status (200, or an error body naming what refused it),
// /health answers within a second throughout, and ordinary requests sent
// during the burst are served.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <thread>

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace kvlm {
namespace {

using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

constexpr int64_t kMiB = 1 << 20;
constexpr int64_t kBudget = 96 * kMiB;       // --grammar-mem
constexpr int64_t kBodyBudget = 128 * kMiB;  // --body-mem
// What the burst may hold beyond the two budgets: the bodies' text (64 of at
// most 330 KB), HTTP buffers and the threads' stacks and arenas, the
// running requests' matchers (at most 4 MiB each) and the engine's work.
constexpr int64_t kMargin = 128 * kMiB;
constexpr int kRequests = 64;

int64_t proc_status_bytes(int pid, const std::string& key) {
  std::ifstream f(fmt::format("/proc/{}/status", pid));
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key + ":", 0) == 0) return std::stoll(line.substr(key.size() + 1)) * 1024;
  return -1;
}

// Resets the process's peak RSS (VmHWM) to its current RSS.
bool reset_peak(int pid) {
  std::ofstream f(fmt::format("/proc/{}/clear_refs", pid));
  f << "5";
  return static_cast<bool>(f.flush());
}

Json schema_request(const Json& schema) {
  return {{"prompt", "Once upon a time"}, {"max_tokens", 4}, {"temperature", 0},
          {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "s"}, {"schema", schema}}}}}};
}

Json objects(int n, int num_props, const std::string& salt) {
  Json list = Json::array();
  for (int i = 0; i < n; ++i) {
    Json props = Json::object(), required = Json::array();
    for (int k = 0; k < num_props; ++k) {
      const std::string key = fmt::format("{}p{}_{}", salt, i, k);
      props[key] = {{"type", k % 2 ? "string" : "integer"}};
      required.push_back(key);
    }
    list.push_back({{"type", "object"}, {"properties", props}, {"required", required}});
  }
  return list;
}

// Request i of the burst; the salt keeps every grammar different.
std::pair<std::string, Json> hostile_request(int i) {
  const std::string salt = fmt::format("r{}", i);
  switch (i % 6) {
    case 0: return {"anyOf of 1,500 objects", schema_request({{"anyOf", objects(1500, 1, salt)}})};
    case 1: return {"oneOf of 40 x 40 properties", schema_request({{"oneOf", objects(40, 40, salt)}})};
    case 2: {
      Json props = Json::object();
      for (int k = 0; k < 300; ++k) props[fmt::format("{}k{}", salt, k)] = {{"type", "integer"}};
      return {"min/maxProperties over 300",
              schema_request({{"type", "object"}, {"properties", props}, {"minProperties", 1}, {"maxProperties", 299}})};
    }
    case 3: {
      Json values = Json::array();
      for (int k = 0; k < 20000; ++k) values.push_back(fmt::format("{}-{}", salt, k));
      return {"enum of 20,000", schema_request({{"enum", values}})};
    }
    case 4:
      return {"repeated regex", {{"prompt", "Once"}, {"max_tokens", 4}, {"guided_regex", fmt::format("({}|[a-z]{{1,40}}){{1,2000}}", salt)}}};
    default: {
      Json tools = Json::array();
      for (int t = 0; t < 16; ++t)
        tools.push_back({{"type", "function"},
                         {"function", {{"name", fmt::format("{}_f{}", salt, t)}, {"strict", true},
                                       {"parameters", objects(1, 40, fmt::format("{}t{}", salt, t))[0]}}}});
      return {"16 strict tools", {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"tools", tools},
                                  {"tool_choice", "required"}, {"max_tokens", 4}}};
    }
  }
}

struct Answer {
  std::string shape;
  int status = -1;
  std::string body;
};

// A status and a body that says what it is: choices for 200, an OpenAI
// error with a message otherwise. "" or what is wrong.
std::string check_answer(const Answer& a) {
  if (a.status < 0) return "no answer";
  Json body;
  try {
    body = Json::parse(a.body);
  } catch (const std::exception&) {
    return "a body that is not JSON: " + a.body.substr(0, 200);
  }
  if (a.status == 200) return body.contains("choices") ? "" : "200 without choices";
  if (a.status != 400 && a.status != 503) return fmt::format("status {}", a.status);
  if (!body.contains("error") || !body["error"]["message"].is_string() || body["error"]["message"].get<std::string>().empty())
    return "an error without a message: " + a.body.substr(0, 200);
  return "";
}

struct Watch {
  std::atomic<bool> stop{false};
  double worst_health_s = 0;
  int num_health = 0, num_health_failed = 0;
  int num_ordinary = 0, num_ordinary_served = 0;
  double most_grammar_bytes = 0, most_body_bytes = 0;  // the budgets' use, as /metrics showed it
};

// /health every 50 ms (each must answer 200 within 1 s) and an ordinary
// completion every 200 ms, until stopped.
void watch(int port, Watch& w) {
  httplib::Client health("127.0.0.1", port), ordinary("127.0.0.1", port);
  health.set_read_timeout(5);
  ordinary.set_read_timeout(60);
  const std::string plain = Json{{"prompt", "Once upon a time"}, {"max_tokens", 4}, {"temperature", 0}}.dump();
  auto last_ordinary = Clock::now() - std::chrono::seconds(1);
  while (!w.stop) {
    const auto t0 = Clock::now();
    auto r = health.Get("/health");
    w.worst_health_s = std::max(w.worst_health_s, std::chrono::duration<double>(Clock::now() - t0).count());
    ++w.num_health;
    if (!r || r->status != 200) ++w.num_health_failed;
    if (auto m = health.Get("/metrics"); m && m->status == 200) {
      w.most_grammar_bytes = std::max(w.most_grammar_bytes, test::metric_sample(m->body, "kvlm_grammar_memory_bytes"));
      w.most_body_bytes = std::max(w.most_body_bytes, test::metric_sample(m->body, "kvlm_body_memory_bytes"));
    }
    if (Clock::now() - last_ordinary > std::chrono::milliseconds(200)) {
      last_ordinary = Clock::now();
      ++w.num_ordinary;
      auto o = ordinary.Post("/v1/completions", plain, "application/json");
      if (o && o->status == 200) ++w.num_ordinary_served;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

TEST(GrammarBurst, MemoryStaysWithinTheBudgetAndComesBack) {
  // The chat template lets the tools requests reach their grammars (their
  // prompts are then too long for the context: a 400 after compiling).
  test::ServerProcess server({"-m", test::shared_path("models/stories260K.gguf"), "--chat-template-file",
                              test::shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"), "-t", "1", "--ctx", "2048",
                              "--grammar-mem", std::to_string(kBudget), "--body-mem", std::to_string(kBodyBudget),
                              "--grammar-compilations", "2",
                              "--grammar-wait-ms", "10000", "--served-model-name", "m"});
  ASSERT_GT(server.port(), 0);
  std::vector<std::string> bodies;
  for (int i = 0; i < kRequests; ++i) bodies.push_back(hostile_request(i).second.dump());
  httplib::Client cli("127.0.0.1", server.port());
  // Warm: the first requests allocate what the server keeps (threads, the
  // token index, KV pages).
  for (int i = 0; i < 3; ++i) cli.Post("/v1/completions", R"({"prompt":"Once upon a time","max_tokens":8})", "application/json");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const int64_t idle = proc_status_bytes(server.pid(), "VmRSS");
  ASSERT_TRUE(reset_peak(server.pid()));

  Watch w;
  std::thread watcher(watch, server.port(), std::ref(w));
  std::vector<Answer> answers(kRequests);
  std::vector<std::thread> clients;
  const auto t0 = Clock::now();
  for (int i = 0; i < kRequests; ++i)
    clients.emplace_back([&, i] {
      httplib::Client c("127.0.0.1", server.port());
      c.set_read_timeout(120);
      const bool chat = i % 6 == 5;
      auto r = c.Post(chat ? "/v1/chat/completions" : "/v1/completions", bodies[i], "application/json");
      answers[i] = {hostile_request(i).first, r ? r->status : -1, r ? r->body : ""};
    });
  for (auto& t : clients) t.join();
  const double burst_s = std::chrono::duration<double>(Clock::now() - t0).count();
  w.stop = true;
  watcher.join();
  const int64_t peak = proc_status_bytes(server.pid(), "VmHWM");
  bodies.clear();
  std::this_thread::sleep_for(std::chrono::seconds(5));
  const int64_t after = proc_status_bytes(server.pid(), "VmRSS");
  const std::string metrics = test::metrics_text(server);

  std::map<std::string, int> statuses;
  for (const Answer& a : answers) {
    std::string code;
    if (a.status != 200) try {
        code = " " + Json::parse(a.body)["error"].value("code", std::string("-"));
      } catch (const std::exception&) {
      }
    ++statuses[fmt::format("{} {}{}", a.shape, a.status, code)];
    const std::string wrong = check_answer(a);
    EXPECT_EQ(wrong, "") << a.shape;
  }
  std::string summary = fmt::format(
      "grammar burst: {} requests in {:.1f} s; idle {:.0f} MiB, peak +{:.0f} MiB (grammars held at most {:.0f} MiB, "
      "parsed bodies {:.0f} MiB), 5 s later +{:.0f} MiB; /health worst {:.0f} ms of {}; ordinary {}/{}\n",
      kRequests, burst_s, idle / 1048576.0, (peak - idle) / 1048576.0, w.most_grammar_bytes / 1048576.0,
      w.most_body_bytes / 1048576.0, (after - idle) / 1048576.0, w.worst_health_s * 1e3, w.num_health,
      w.num_ordinary_served, w.num_ordinary);
  for (const auto& [k, n] : statuses) summary += fmt::format("  {}: {}\n", k, n);
  std::fputs(summary.c_str(), stdout);

  EXPECT_LT(peak - idle, kBudget + kBodyBudget + kMargin) << summary;
  EXPECT_LT(after - idle, 128 * kMiB) << summary;
  EXPECT_LT(w.worst_health_s, 1.0) << summary;
  EXPECT_EQ(w.num_health_failed, 0) << summary;
  EXPECT_GT(w.num_ordinary, 0) << summary;
  EXPECT_EQ(w.num_ordinary_served, w.num_ordinary) << summary;
  // The burst reached the limits it is about, and gave everything back.
  EXPECT_GT(test::metric_sample(metrics, "kvlm_grammar_refused_total{model_name=\"m\",reason=\"too_large\"}"), 0)
      << metrics;
  EXPECT_EQ(test::metric_sample(metrics, "kvlm_grammar_compilations_running"), 0);
  EXPECT_LE(test::metric_sample(metrics, "kvlm_grammar_memory_bytes"), static_cast<double>(kBudget));
  EXPECT_EQ(test::metric_sample(metrics, "kvlm_grammar_memory_budget_bytes"), static_cast<double>(kBudget));
}

}  // namespace
}  // namespace kvlm
