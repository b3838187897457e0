// The front door of kvlm serve and kvlm router over real HTTP(S): HTTPS with
// a certificate the test makes (the official openai client given its CA),
// several keys (Bearer and x-api-key), per-key limits answered 429 with
// Retry-After while other keys go on, metrics per key name (never the key),
// the metrics key, and the key file reloaded on SIGHUP without dropping a
// request in flight.
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "e2e/router_fleet.h"
#include "support/test_support.h"

namespace kvlm::front_door_test {

using Json = nlohmann::json;

std::string model() { return test::shared_path("models/stories260K.gguf"); }

int post_status(int port, const std::string& path, const Json& body, const httplib::Headers& headers = {},
                std::string* retry_after = nullptr) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(30);
  auto r = c.Post(path, headers, body.dump(), "application/json");
  if (r && retry_after) *retry_after = r->get_header_value("Retry-After");
  return r ? r->status : -1;
}

const Json kSmall = {{"prompt", "Once"}, {"max_tokens", 4}, {"temperature", 0}};

httplib::Headers bearer(const std::string& key) { return {{"Authorization", "Bearer " + key}}; }

TEST(FrontDoor, HttpsWithTheOfficialClientAndAGivenCa) {
  ASSERT_TRUE(test::have_program("openssl")) << "openssl is required (scripts/setup.sh installs it)";
  const auto [cert, key] = test::make_certificate();
  test::ServerProcess server({"-m", model(), "-t", "1", "--ssl-cert-file", cert, "--ssl-key-file", key, "--api-key",
                              "sk-https"});
  ASSERT_GT(server.port(), 0);
  EXPECT_NE(server.err_so_far().find("listening on https://"), std::string::npos);
  const std::string url = "https://127.0.0.1:" + std::to_string(server.port());
  const auto r = test::run_program({"env", "NODE_EXTRA_CA_CERTS=" + cert, "node",
                                    std::string(KVLM_SOURCE_DIR) + "/tests/npm/https_client.mjs", url, "sk-https"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_FALSE(j["text"].get<std::string>().empty());
  EXPECT_EQ(j["streamed"], j["text"]) << "streamed over TLS as whole";
  EXPECT_EQ(j["wrong_key"], 401);
  // Plain HTTP to the HTTPS port gets no answer; curl without the CA refuses the certificate.
  EXPECT_EQ(post_status(server.port(), "/v1/completions", kSmall, bearer("sk-https")), -1);
  const auto untrusted = test::run_program({"curl", "-sS", url + "/health"});
  EXPECT_NE(untrusted.exit_code, 0);
  const auto trusted = test::run_program({"curl", "-sS", "--cacert", cert, url + "/health"});
  EXPECT_EQ(trusted.exit_code, 0) << trusted.err;
}

TEST(FrontDoor, AnUnreadableCertificateIsAClearStartupError) {
  const auto [cert, key] = test::make_certificate();
  auto r = test::run_kvlm({"serve", "-m", model(), "--ssl-cert-file", "/nonexistent/cert.pem", "--ssl-key-file", key});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--ssl-cert-file /nonexistent/cert.pem: cannot read it"), std::string::npos) << r.err;
  r = test::run_kvlm({"serve", "-m", model(), "--ssl-cert-file", key, "--ssl-key-file", cert});  // swapped
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("OpenSSL cannot load them"), std::string::npos) << r.err;
  r = test::run_kvlm({"router", "--workers", "http://127.0.0.1:1", "--ssl-cert-file", cert});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("go together"), std::string::npos) << r.err;
}

std::string write_keys(const std::string& name, const std::string& text) {
  return test::write_temp_file(name, text);
}

TEST(FrontDoor, KeysLimitsMetricsAndReload) {
  const std::string file = write_keys("keys.txt",
                                      "# team keys\n"
                                      "sk-aaaa name=team-a rpm=3\n"
                                      "sk-bbbb name=team-b\n"
                                      "sk-cccc name=tokens tpm=20\n");
  test::ServerProcess server({"-m", model(), "-t", "1", "--api-key", "sk-plain", "--api-key-file", file,
                              "--metrics-key", "sk-metrics"});
  const int port = server.port();
  // Every key, as Bearer or x-api-key; a wrong or missing one is a 401.
  EXPECT_EQ(post_status(port, "/v1/completions", kSmall, bearer("sk-plain")), 200);
  EXPECT_EQ(post_status(port, "/v1/completions", kSmall, {{"x-api-key", "sk-bbbb"}}), 200);
  EXPECT_EQ(post_status(port, "/v1/completions", kSmall, bearer("sk-bbbbX")), 401);
  EXPECT_EQ(post_status(port, "/v1/completions", kSmall), 401);
  // team-a: 3 a minute, then 429 with Retry-After; team-b is unaffected.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(post_status(port, "/v1/completions", kSmall, bearer("sk-aaaa")), 200) << i;
  std::string retry_after;
  EXPECT_EQ(post_status(port, "/v1/completions", kSmall, bearer("sk-aaaa"), &retry_after), 429);
  EXPECT_GE(std::stoi(retry_after), 1);
  EXPECT_EQ(post_status(port, "/v1/completions", kSmall, bearer("sk-bbbb")), 200);
  // 20 tokens a minute: one request spends them (5 prompt + 4 + ...), the next waits.
  EXPECT_EQ(post_status(port, "/v1/completions", {{"prompt", "Once upon a time there"}, {"max_tokens", 16}},
                        bearer("sk-cccc")),
            200);
  EXPECT_EQ(post_status(port, "/v1/completions", kSmall, bearer("sk-cccc")), 429);
  // Metrics: behind the metrics key, per key name, never a key.
  httplib::Client c("127.0.0.1", port);
  EXPECT_EQ(c.Get("/metrics")->status, 401);
  EXPECT_EQ(c.Get("/v1/status", bearer("sk-metrics"))->status, 200);
  EXPECT_EQ(c.Get("/v1/status", bearer("sk-bbbb"))->status, 200) << "the chat page's key";
  const std::string metrics = c.Get("/metrics", bearer("sk-metrics"))->body;
  EXPECT_EQ(test::metric_sample(metrics, R"(kvlm_api_key_requests_total{key="team-a"})"), 3);
  EXPECT_EQ(test::metric_sample(metrics, R"(kvlm_api_key_rejected_total{key="team-a",limit="requests_per_minute"})"), 1);
  EXPECT_GT(test::metric_sample(metrics, R"(kvlm_api_key_tokens_total{key="tokens"})"), 20);
  EXPECT_EQ(metrics.find("sk-"), std::string::npos) << "a key in the metrics";

  // SIGHUP: team-b goes, team-d comes; a stream under team-b in flight finishes.
  std::atomic<int> stream_status{0};
  std::thread in_flight([&] {
    stream_status = post_status(port, "/v1/completions",
                                {{"prompt", "Once"}, {"max_tokens", 1500}, {"ignore_eos", true}, {"stream", true}},
                                bearer("sk-bbbb"));
  });
  // The reload must come while the stream runs (not before its key was checked).
  for (int i = 0; i < 500 && test::metric_sample(c.Get("/metrics", bearer("sk-metrics"))->body,
                                                 "kvlm_requests_running") < 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  write_keys("keys.txt", "sk-aaaa name=team-a rpm=3\nsk-dddd name=team-d\n");
  server.send_signal(SIGHUP);
  int d_status = 0;
  for (int i = 0; i < 200 && (d_status = post_status(port, "/v1/completions", kSmall, bearer("sk-dddd"))) == 401; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(d_status, 200);
  EXPECT_EQ(post_status(port, "/v1/completions", kSmall, bearer("sk-bbbb")), 401);
  in_flight.join();
  EXPECT_EQ(stream_status, 200);
  // A file that no longer parses keeps the keys in use.
  write_keys("keys.txt", "sk-eeee rpm=lots\n");
  server.send_signal(SIGHUP);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(post_status(port, "/v1/completions", kSmall, bearer("sk-dddd")), 200);
  EXPECT_NE(server.err_so_far().find("not reloaded"), std::string::npos);
}

TEST(FrontDoor, TheRouterTakesTheSameKeysAndTls) {
  const auto [cert, key] = test::make_certificate();
  test::Fleet fleet({.num_workers = 1, .worker_args = {"--api-key", "sk-worker"},
                     .router_args = {"--api-key", "sk-client", "--worker-api-key", "sk-worker", "--ssl-cert-file", cert,
                                     "--ssl-key-file", key, "--policy", "least-load"},
                     .start_router = true});
  const std::string url = "https://127.0.0.1:" + std::to_string(fleet.router_port());
  const auto r = test::run_program({"env", "NODE_EXTRA_CA_CERTS=" + cert, "node",
                                    std::string(KVLM_SOURCE_DIR) + "/tests/npm/https_client.mjs", url, "sk-client"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Json::parse(r.out)["wrong_key"], 401);
}

}  // namespace kvlm::front_door_test
