// Graceful shutdown of `kvlm serve`: SIGTERM during streaming requests lets
// them finish (or cancels them at --drain-timeout), /health answers 503 in
// between, the process exits 0 with every KV block back; a second signal
// exits at once. The F32 model generates slowly enough that a drain lasts
// long enough to be watched.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <functional>
#include <mutex>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace kvlm::drain_test {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string slow_model() { return test::shared_path("models/synth-tiny-F32.gguf"); }

// One streaming completion on its own thread, its whole body kept.
class StreamingRequest {
 public:
  StreamingRequest(int port, int max_tokens) {
    thread_ = std::thread([this, port, max_tokens] {
      httplib::Client cli("127.0.0.1", port);
      cli.set_read_timeout(120);
      httplib::Request req;
      req.method = "POST";
      req.path = "/v1/completions";
      req.headers = {{"Content-Type", "application/json"}};
      req.body = Json{{"prompt", "Once upon a time"}, {"max_tokens", max_tokens}, {"ignore_eos", true},
                      {"temperature", 0}, {"stream", true}, {"stream_options", {{"include_usage", true}}}}
                     .dump();
      req.content_receiver = [this](const char* data, size_t n, uint64_t, uint64_t) {
        std::lock_guard lock(mu_);
        body_.append(data, n);
        if (body_.find("\"text\"") != std::string::npos) started_ = true;
        return true;
      };
      auto res = cli.send(req);
      status_ = res ? res->status : -1;
      finished_ = true;
    });
  }
  ~StreamingRequest() { join(); }
  void join() {
    if (thread_.joinable()) thread_.join();
  }
  bool started() const { return started_; }
  bool finished() const { return finished_; }
  int status() const { return status_; }
  std::string body() const {
    std::lock_guard lock(mu_);
    return body_;
  }

 private:
  std::thread thread_;
  mutable std::mutex mu_;
  std::string body_;
  std::atomic<bool> started_{false}, finished_{false};
  std::atomic<int> status_{0};
};

struct StreamSummary {
  bool ends_with_done = false;
  std::string finish_reason;
  int completion_tokens = -1;
};

StreamSummary summarize(const std::string& body) {
  StreamSummary s;
  std::vector<std::string> events;
  for (size_t pos = 0; (pos = body.find("data: ", pos)) != std::string::npos;) {
    const size_t end = body.find("\n\n", pos);
    events.push_back(body.substr(pos + 6, end == std::string::npos ? std::string::npos : end - pos - 6));
    if (end == std::string::npos) break;
    pos = end;
  }
  s.ends_with_done = !events.empty() && events.back() == "[DONE]" && body.size() >= 2 &&
                     body.compare(body.size() - 2, 2, "\n\n") == 0;
  for (const std::string& e : events) {
    if (e == "[DONE]") continue;
    const Json j = Json::parse(e);
    if (!j["choices"].empty() && !j["choices"][0]["finish_reason"].is_null()) s.finish_reason = j["choices"][0]["finish_reason"];
    if (j.contains("usage") && j["usage"].is_object()) s.completion_tokens = j["usage"]["completion_tokens"];
  }
  return s;
}

int health_status(int port) {
  httplib::Client cli("127.0.0.1", port);
  auto res = cli.Get("/health");
  return res ? res->status : -1;
}

bool wait_until(const std::function<bool()>& cond, std::chrono::seconds limit) {
  for (const auto deadline = Clock::now() + limit; Clock::now() < deadline;) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return cond();
}

// cpp-httplib builds function-local statics on first use: regexes in the
// client (this process) and the chunked "0\r\n\r\n" marker in the server.
// One whole streamed request before the concurrent ones builds them first:
// ThreadSanitizer cannot see the guards inside the uninstrumented library
// and would report their first concurrent use as a race.
void warm_up_http_client(int port) {
  httplib::Client cli("127.0.0.1", port);
  auto res = cli.Post("/v1/completions", R"({"prompt":"Once","max_tokens":1,"stream":true})", "application/json");
  ASSERT_TRUE(res);
  ASSERT_NE(res->body.find("[DONE]"), std::string::npos) << res->body;
}

TEST(ServerDrain, SigtermLetsEveryRunningStreamFinish) {
  constexpr int kStreams = 8, kMaxTokens = 500;  // the model's context is 512
  test::ServerProcess server({"-m", slow_model(), "-t", "1", "--drain-timeout", "120"});
  ASSERT_GT(server.port(), 0);
  warm_up_http_client(server.port());
  std::vector<std::unique_ptr<StreamingRequest>> streams;
  for (int i = 0; i < kStreams; ++i) streams.push_back(std::make_unique<StreamingRequest>(server.port(), kMaxTokens));
  ASSERT_TRUE(wait_until([&] { return std::all_of(streams.begin(), streams.end(), [](auto& s) { return s->started(); }); },
                         std::chrono::seconds(60)));
  ASSERT_EQ(health_status(server.port()), 200);

  server.send_signal(SIGTERM);
  ASSERT_TRUE(wait_until([&] { return health_status(server.port()) == 503; }, std::chrono::seconds(30)));
  // The drain was seen while work was still running: not one 503 by luck after the end.
  int num_unfinished = 0;
  for (auto& s : streams) num_unfinished += !s->finished();
  EXPECT_GT(num_unfinished, 0) << "every stream had ended before /health said 503";
  // New work is refused during the drain.
  httplib::Client cli("127.0.0.1", server.port());
  auto refused = cli.Post("/v1/completions", R"({"prompt":"Once","max_tokens":2})", "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 503) << refused->body;
  EXPECT_NE(refused->body.find("shutting down"), std::string::npos) << refused->body;

  for (auto& s : streams) {
    s->join();
    const StreamSummary sum = summarize(s->body());
    EXPECT_EQ(s->status(), 200);
    EXPECT_TRUE(sum.ends_with_done) << s->body().substr(s->body().size() > 300 ? s->body().size() - 300 : 0);
    EXPECT_EQ(sum.finish_reason, "length");
    EXPECT_EQ(sum.completion_tokens, kMaxTokens);  // finished, not cut
  }
  const auto r = server.wait();
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("drained (0 requests cancelled); requests left 0, KV blocks in use 0"), std::string::npos) << r.err;
}

TEST(ServerDrain, DeadlineCancelsWhatIsStillRunning) {
  constexpr int kMaxTokens = 500;
  test::ServerProcess server({"-m", slow_model(), "-t", "1", "--drain-timeout", "0.05"});
  ASSERT_GT(server.port(), 0);
  warm_up_http_client(server.port());
  std::vector<std::unique_ptr<StreamingRequest>> streams;
  for (int i = 0; i < 4; ++i) streams.push_back(std::make_unique<StreamingRequest>(server.port(), kMaxTokens));
  ASSERT_TRUE(wait_until([&] { return std::all_of(streams.begin(), streams.end(), [](auto& s) { return s->started(); }); },
                         std::chrono::seconds(60)));
  const auto t0 = Clock::now();
  server.send_signal(SIGTERM);
  const auto r = server.wait();
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(20));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("drained (4 requests cancelled); requests left 0, KV blocks in use 0"), std::string::npos) << r.err;
  for (auto& s : streams) {
    s->join();
    const StreamSummary sum = summarize(s->body());
    EXPECT_TRUE(sum.ends_with_done) << s->body().substr(s->body().size() > 300 ? s->body().size() - 300 : 0);
    EXPECT_FALSE(sum.finish_reason.empty());
    EXPECT_GT(sum.completion_tokens, 0);
    EXPECT_LT(sum.completion_tokens, kMaxTokens);
  }
}

// One sequence at a time and three queued requests: the drain has seconds
// of work ahead when the second signal comes.
TEST(ServerDrain, SecondSignalExitsAtOnce) {
  test::ServerProcess server({"-m", slow_model(), "-t", "1", "--drain-timeout", "120", "--max-seqs", "1"});
  ASSERT_GT(server.port(), 0);
  warm_up_http_client(server.port());
  StreamingRequest a(server.port(), 500), b(server.port(), 500), c(server.port(), 500);
  ASSERT_TRUE(wait_until([&] { return a.started() || b.started() || c.started(); }, std::chrono::seconds(60)));
  server.send_signal(SIGTERM);
  ASSERT_TRUE(wait_until([&] { return health_status(server.port()) == 503; }, std::chrono::seconds(30)));
  const auto t0 = Clock::now();
  server.send_signal(SIGINT);
  const auto r = server.wait();
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
  EXPECT_EQ(r.exit_code, 128 + SIGINT) << r.err;
  EXPECT_NE(r.err.find("second signal"), std::string::npos) << r.err;
  int num_complete = 0;
  for (StreamingRequest* s : {&a, &b, &c}) {
    s->join();
    num_complete += summarize(s->body()).completion_tokens == 500;
  }
  EXPECT_LT(num_complete, 3);  // the drain was cut short
}

}  // namespace kvlm::drain_test
