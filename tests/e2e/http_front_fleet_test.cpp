// The transport's defences where they matter beyond one plain server: TCP
// connections that never start their TLS handshake against an HTTPS server,
// and the router, whose old transport stopped at 256 idle connections (one
// thread each), with its framing as strict as kvlm serve's.
#include <gtest/gtest.h>

#include <thread>

#include <nlohmann/json.hpp>

#include "e2e/router_fleet.h"
#include "support/raw_socket.h"
#include "support/test_support.h"

namespace kvlm::http_front_fleet_test {

using Json = nlohmann::json;
using Ms = std::chrono::milliseconds;

TEST(HttpTls, SilentConnectionsTimeOutWhileHttpsClientsAreServed) {
  ASSERT_TRUE(test::have_program("openssl") && test::have_program("curl"));
  test::raise_open_files();
  const auto [cert, key] = test::make_certificate();
  test::ServerProcess server({"-m", test::shared_path("models/stories260K.gguf"), "-t", "1", "--ssl-cert-file", cert,
                              "--ssl-key-file", key, "--tls-handshake-timeout-ms", "1500"});
  const std::string url = "https://127.0.0.1:" + std::to_string(server.port());
  // 300 connections that never send a ClientHello (the old transport gave
  // each a thread with no deadline).
  std::vector<int> silent;
  for (int i = 0; i < 300; ++i) silent.push_back(test::connect_socket_from(server.port(), "127.0.4." + std::to_string(1 + i % 50)));
  const auto r = test::run_program({"curl", "-sS", "--max-time", "20", "--cacert", cert, url + "/v1/completions", "-d",
                                    R"({"prompt":"Once upon a time","max_tokens":4,"temperature":0})"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Json::parse(r.out, nullptr, false)["choices"][0]["finish_reason"], "length") << r.out;
  // Each is closed at its handshake deadline.
  for (int fd : silent) {
    const test::Received closed = test::receive_until_close(fd, Ms(20000));
    EXPECT_TRUE(closed.closed);
    test::close_socket(fd);
  }
  const auto metrics = test::run_program({"curl", "-sS", "--cacert", cert, url + "/metrics"});
  EXPECT_GE(test::metric_sample(metrics.out, "kvlm_http_refused_total{reason=\"tls_handshake_timeout\"}"), 300);
}

TEST(HttpRouter, IdleConnectionsPastItsOldThreadCountDoNotStopIt) {
  test::raise_open_files();
  test::Fleet fleet({.num_workers = 1, .router_args = {"--policy", "least-load"}});
  fleet.wait_ready();
  std::vector<int> idle;
  for (int i = 0; i < 600; ++i) idle.push_back(test::connect_socket_from(fleet.router_port(), "127.0.5." + std::to_string(1 + i % 50)));
  // Streams beside them: more at once than the old router had threads.
  std::vector<std::thread> clients;
  std::atomic<int> num_done{0};
  for (int i = 0; i < 300; ++i) {
    clients.emplace_back([&] {
      int status = 0;
      const std::vector<Json> events =
          test::http_stream(fleet.router_port(), "/v1/completions",
                            {{"prompt", "Once upon a time"}, {"max_tokens", 8}, {"stream", true}}, &status);
      if (status == 200 && !events.empty()) ++num_done;
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(num_done.load(), 300);
  const test::HttpAnswer a = test::http_post(fleet.router_port(), "/v1/completions",
                                             {{"prompt", "Once upon a time"}, {"max_tokens", 4}, {"temperature", 0}});
  EXPECT_EQ(a.status, 200) << a.body;
  for (int fd : idle) test::close_socket(fd);
}

TEST(HttpRouter, ItsFramingIsAsStrictAsServes) {
  test::Fleet fleet({.num_workers = 1, .router_args = {"--policy", "least-load"}});
  const std::string body = R"({"prompt":"Once","max_tokens":1})";
  const std::string smuggled = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                               std::to_string(body.size()) + "\r\nTransfer-Encoding: chunked\r\n\r\n" + body +
                               "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n";
  const int fd = test::connect_socket(fleet.router_port());
  test::send_all(fd, smuggled);
  const test::Received r = test::receive_until_close(fd, Ms(10000));
  test::close_socket(fd);
  EXPECT_TRUE(r.closed);
  EXPECT_EQ(r.bytes.rfind("HTTP/1.1 400 ", 0), 0u) << r.bytes;
  EXPECT_EQ(r.bytes.find("HTTP/1.1 ", 1), std::string::npos) << "one answer only: " << r.bytes;
}

}  // namespace kvlm::http_front_fleet_test
