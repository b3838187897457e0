// The transport as a careful operator would try it before putting kvlm on a
// network, over raw sockets against a real `kvlm serve`: request smuggling
// (every framing rule answered 4xx and the connection closed), pipelining,
// the deadlines (slowloris heads, slow bodies, idle keep-alive), the head's
// limits, the connection caps, a slow stream reader dropped and its request
// cancelled, and a normal client served while thousands of idle and slow
// connections are open.
#include <gtest/gtest.h>

#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "support/raw_socket.h"
#include "support/test_support.h"

namespace kvlm::http_front_test {

using Json = nlohmann::json;
using Ms = std::chrono::milliseconds;

std::string model() { return test::shared_path("models/stories260K.gguf"); }

// The status and the body of the first response in `bytes` (0: none).
struct Answer {
  int status = 0;
  std::string head, body;
};
Answer first_answer(const std::string& bytes) {
  Answer a;
  const size_t end = bytes.find("\r\n\r\n");
  if (bytes.rfind("HTTP/1.", 0) != 0 || end == std::string::npos) return a;
  a.status = std::stoi(bytes.substr(9, 3));
  a.head = bytes.substr(0, end);
  a.body = bytes.substr(end + 4);
  return a;
}

int count_answers(const std::string& bytes) {
  int n = 0;
  for (size_t at = bytes.find("HTTP/1.1 "); at != std::string::npos; at = bytes.find("HTTP/1.1 ", at + 1)) ++n;
  return n;
}

// Sends `bytes` on a new connection and reads until the server closes it.
test::Received exchange(int port, const std::string& bytes, Ms timeout = Ms(10000)) {
  const int fd = test::connect_socket(port);
  EXPECT_GE(fd, 0);
  test::send_all(fd, bytes);
  test::Received r = test::receive_until_close(fd, timeout);
  test::close_socket(fd);
  return r;
}

// Sends `bytes` one at a time, `interval` apart, reading what comes back
// meanwhile; stops early once the server has closed the connection.
test::Received trickle(int fd, const std::string& bytes, Ms interval) {
  test::Received r;
  for (size_t i = 0; i < bytes.size() && !r.closed; ++i) {
    test::send_all(fd, bytes.substr(i, 1));
    const test::Received more = test::receive_until_close(fd, interval);
    r.bytes += more.bytes;
    r.closed = more.closed;
  }
  return r;
}

bool eventually(const std::function<bool()>& condition, Ms timeout = Ms(20000)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(Ms(20));
  }
  return condition();
}

double refused(const test::ServerProcess& server, const std::string& reason) {
  return test::server_metric(server, "kvlm_http_refused_total{reason=\"" + reason + "\"}");
}

const std::string kBody = R"({"prompt":"Once upon a time","max_tokens":4,"temperature":0})";
// The request an attacker hopes to read as the first one's body: its key
// must never come back in an answer.
const std::string kVictim = "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-victim-secret\r\n\r\n";

class HttpFront : public test::ServerSuite<HttpFront> {
 public:
  static std::vector<std::string> server_args() {
    return {"-m", model(), "-t", "1", "--header-timeout-ms", "1000", "--keep-alive-timeout-ms", "500", "--body-timeout-ms", "500", "--body-min-rate", "100000", "--max-header-bytes", "8192", "--max-headers", "50"};
  }
  static int port() { return server_->port(); }
};

TEST_F(HttpFront, SmugglingAttemptsAreRefusedWithJsonAndTheConnectionCloses) {
  const std::string post = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n";
  const std::string n = std::to_string(kBody.size());
  struct Case {
    std::string what, head;
    int status;
  };
  const std::vector<Case> cases = {
      {"two different Content-Lengths", "Content-Length: " + n + "\r\nContent-Length: 500\r\n", 400},
      {"Content-Length with Transfer-Encoding", "Content-Length: " + n + "\r\nTransfer-Encoding: chunked\r\n", 400},
      {"an obfuscated Transfer-Encoding", "Transfer-Encoding: xchunked\r\n", 400},
      {"Transfer-Encoding with another coding", "Transfer-Encoding: gzip, chunked\r\n", 400},
      {"a negative Content-Length", "Content-Length: -1\r\n", 400},
      {"a Content-Length of 10^23", "Content-Length: 100000000000000000000000\r\n", 413},
      {"whitespace before a colon", "Content-Length : " + n + "\r\n", 400},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const test::Received r = exchange(port(), post + c.head + "\r\n" + kBody + kVictim);
    EXPECT_TRUE(r.closed) << "the connection is closed, never held";
    const Answer a = first_answer(r.bytes);
    EXPECT_EQ(a.status, c.status) << r.bytes;
    EXPECT_EQ(count_answers(r.bytes), 1) << "the request after it is never answered: " << r.bytes;
    EXPECT_EQ(r.bytes.find("sk-victim-secret"), std::string::npos) << r.bytes;
    EXPECT_NE(a.head.find("Connection: close"), std::string::npos) << a.head;
    const Json j = Json::parse(a.body, nullptr, false);
    ASSERT_TRUE(j.is_object()) << a.body;
    EXPECT_FALSE(j["error"]["message"].get<std::string>().empty());
  }
  // A bad chunk size: refused the same way.
  const test::Received chunk = exchange(port(), post + "Transfer-Encoding: chunked\r\n\r\n-5\r\nhello\r\n0\r\n\r\n");
  EXPECT_EQ(first_answer(chunk.bytes).status, 400) << chunk.bytes;
  EXPECT_TRUE(chunk.closed);
  EXPECT_GE(refused(*server_, "bad_framing"), 6);
}

TEST_F(HttpFront, AJsonBodyWithBytesAfterItIsRefused) {
  const std::string body = std::string(R"({"prompt":"a","max_tokens":1})") + '\0' + R"({"prompt":"b"})";
  const test::Received r = exchange(port(), test::raw_post("/v1/completions", body));
  const Answer a = first_answer(r.bytes);
  EXPECT_EQ(a.status, 400) << r.bytes;
  EXPECT_NE(a.body.find("NUL"), std::string::npos) << a.body;
}

TEST_F(HttpFront, PipelinedRequestsAreAnsweredInOrderAndChunkedBodiesRead) {
  std::string chunked = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  chunked += fmt::format("{:x}\r\n{}\r\n0\r\n\r\n", kBody.size(), kBody);
  const std::string bytes = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n" + chunked +
                            "GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  const test::Received r = exchange(port(), bytes);
  EXPECT_TRUE(r.closed);
  ASSERT_EQ(count_answers(r.bytes), 3) << r.bytes;
  const size_t health = r.bytes.find("\"status\":\"ok\""), text = r.bytes.find("text_completion"),
               models = r.bytes.find("\"object\":\"list\"");
  EXPECT_LT(health, text);
  EXPECT_LT(text, models);
  EXPECT_NE(models, std::string::npos);
}

TEST_F(HttpFront, ASlowHeadGets408AndAnIdleConnectionIsClosed) {
  const double before = refused(*server_, "header_timeout");
  // A head a byte every 100 ms never completes within the 1 s header timeout.
  const int slow = test::connect_socket(port());
  const test::Received r = trickle(slow, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n", Ms(100));
  test::close_socket(slow);
  EXPECT_TRUE(r.closed) << "a slowloris connection is closed";
  EXPECT_EQ(first_answer(r.bytes).status, 408) << r.bytes;
  EXPECT_GE(refused(*server_, "header_timeout"), before + 1);
  // A connection that never sends a byte is closed without an answer.
  const test::Received idle = exchange(port(), "", Ms(20000));
  EXPECT_TRUE(idle.closed);
  EXPECT_EQ(idle.bytes, "");
  // A kept-alive connection is closed after its keep-alive wait.
  const int kept = test::connect_socket(port());
  test::send_all(kept, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  const test::Received after = test::receive_until_close(kept, Ms(20000));
  test::close_socket(kept);
  EXPECT_EQ(first_answer(after.bytes).status, 200);
  EXPECT_TRUE(after.closed);
}

TEST_F(HttpFront, ABodyUnderTheMinimumRateGets408) {
  const int fd = test::connect_socket(port());
  test::send_all(fd, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{");
  const test::Received r = trickle(fd, std::string(200, ' '), Ms(100));
  test::close_socket(fd);
  EXPECT_TRUE(r.closed);
  EXPECT_EQ(first_answer(r.bytes).status, 408) << r.bytes;
  EXPECT_GE(refused(*server_, "body_too_slow"), 1);
}

TEST_F(HttpFront, HeadsPastTheLimitsGet431) {
  std::string many = "GET /health HTTP/1.1\r\n";
  for (int i = 0; i < 51; ++i) many += "X-Header-" + std::to_string(i) + ": v\r\n";
  test::Received r = exchange(port(), many + "\r\n");
  EXPECT_EQ(first_answer(r.bytes).status, 431) << r.bytes;
  EXPECT_TRUE(r.closed);
  r = exchange(port(), "GET /health HTTP/1.1\r\nX-Big: " + std::string(9000, 'a') + "\r\n\r\n");
  EXPECT_EQ(first_answer(r.bytes).status, 431) << r.bytes;
  EXPECT_TRUE(r.closed);
  // 400,000 headers are refused at the limit, not read into memory.
  const int fd = test::connect_socket(port());
  test::send_all(fd, "GET /health HTTP/1.1\r\n");
  bool sent_all = true;
  for (int i = 0; i < 4000 && sent_all; ++i) sent_all = test::send_all(fd, std::string(100, 'a') + ": b\r\n");
  const test::Received flood = test::receive_until_close(fd, Ms(10000));
  test::close_socket(fd);
  EXPECT_TRUE(flood.closed || !sent_all);
  EXPECT_GE(refused(*server_, "header_too_large") + refused(*server_, "too_many_headers"), 3);
}

TEST(HttpCaps, AnIdleKeptAliveConnectionHoldsNoKeySlot) {
  const std::string keys = test::write_temp_file("one_at_a_time.keys", "sk-one name=one concurrent=1\n");
  test::ServerProcess server({"-m", model(), "-t", "1", "--api-key-file", keys});
  const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-one\r\n"
                              "Content-Length: " + std::to_string(kBody.size()) + "\r\n\r\n" + kBody;
  // A request on a connection that then stays open, idle.
  const int kept = test::connect_socket(server.port());
  test::send_all(kept, request);
  EXPECT_TRUE(eventually([&] { return test::receive_until_close(kept, Ms(50)).bytes.find("text_completion") != std::string::npos; }));
  // The key's one slot is free for another connection.
  std::string other = request;
  other.insert(other.find("\r\n\r\n"), "\r\nConnection: close");
  const Answer a = first_answer(exchange(server.port(), other).bytes);
  EXPECT_EQ(a.status, 200) << a.body;
  test::close_socket(kept);
}

TEST(HttpCaps, ConnectionsPastTheClientCapGet503WhileOtherAddressesGoOn) {
  test::ServerProcess server({"-m", model(), "-t", "1", "--max-connections", "40", "--max-connections-per-client", "5"});
  std::vector<int> held;
  for (int i = 0; i < 5; ++i) held.push_back(test::connect_socket_from(server.port(), "127.0.0.1"));
  Answer a;
  EXPECT_TRUE(eventually([&] {
    const int fd = test::connect_socket_from(server.port(), "127.0.0.1");
    test::send_all(fd, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    a = first_answer(test::receive_until_close(fd, Ms(5000)).bytes);
    test::close_socket(fd);
    return a.status == 503;
  }));
  EXPECT_NE(a.body.find("too_many_client_connections"), std::string::npos) << a.body;
  EXPECT_NE(a.head.find("Retry-After: "), std::string::npos) << a.head;
  // Another address is served.
  const int other = test::connect_socket_from(server.port(), "127.0.0.2");
  test::send_all(other, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(first_answer(test::receive_until_close(other, Ms(5000)).bytes).status, 200);
  test::close_socket(other);
  for (int fd : held) test::close_socket(fd);
}

TEST(HttpStreams, ASlowReaderIsDroppedAndItsRequestCancelled) {
  test::ServerProcess server({"-m", model(), "-t", "1", "--max-stream-buffer", "65536", "--write-timeout-ms", "5000"});
  // A client that asks for a long stream and never reads, with a small window.
  const int fd = test::connect_socket(server.port(), 4096);
  // 16 choices of 1,900 tokens with 20 log-probabilities each: about 25 MB of
  // events, far more than the kernel's socket buffers hold (4 MiB at most).
  const std::string body =
      R"({"prompt":"Once upon a time","max_tokens":1900,"ignore_eos":true,"stream":true,"n":16,"logprobs":20})";
  test::send_all(fd, test::raw_post("/v1/completions", body));
  EXPECT_TRUE(eventually([&] { return test::server_metric(server, "kvlm_http_refused_total{reason=\"slow_reader\"}") >= 1; },
                         Ms(60000)));
  // Its sequence is cancelled: nothing running, every block back.
  EXPECT_TRUE(eventually([&] {
    return test::server_metric(server, "kvlm_requests_running") == 0 && test::server_metric(server, "kvlm_kv_blocks_used") == 0;
  }));
  EXPECT_LT(test::server_metric(server, "kvlm_generation_tokens_total"), 16 * 1900) << "dropped before the stream's end";
  test::close_socket(fd);
}

TEST(HttpLoad, IdleAndSlowConnectionsDoNotStopANormalClient) {
  test::raise_open_files();
  test::ServerProcess server({"-m", model(), "-t", "1"});
  const std::string request = test::raw_post("/v1/completions", kBody);
  const std::string unloaded = first_answer(exchange(server.port(), request).bytes).body;
  ASSERT_FALSE(unloaded.empty());
  // 1,000 idle connections and 300 that send a head a byte at a time, from
  // other loopback addresses: more than the old transport had threads.
  std::vector<int> idle, slow;
  for (int i = 0; i < 1000; ++i) idle.push_back(test::connect_socket_from(server.port(), "127.0.2." + std::to_string(1 + i % 50)));
  for (int i = 0; i < 300; ++i) slow.push_back(test::connect_socket_from(server.port(), "127.0.3." + std::to_string(1 + i % 50)));
  const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n";
  for (int round = 0; round < 3; ++round) {
    for (int fd : slow) test::send_all(fd, head.substr(static_cast<size_t>(round), 1));
    const test::Received r = exchange(server.port(), request, Ms(30000));
    const Answer a = first_answer(r.bytes);
    EXPECT_EQ(a.status, 200) << "round " << round << ": " << r.bytes;
    EXPECT_EQ(Json::parse(a.body, nullptr, false)["choices"][0]["text"],
              Json::parse(unloaded, nullptr, false)["choices"][0]["text"]);
    std::this_thread::sleep_for(Ms(200));
  }
  EXPECT_GE(test::server_metric(server, "kvlm_http_connections_open"), 1000);
  for (int fd : idle) test::close_socket(fd);
  for (int fd : slow) test::close_socket(fd);
}

}  // namespace kvlm::http_front_test
