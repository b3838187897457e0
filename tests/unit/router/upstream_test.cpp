// The router's HTTP client against a real HTTP server (cpp-httplib) on
// loopback: Content-Length and chunked bodies read whole and incrementally,
// keep-alive connections reused (and a closed one replaced), an abort from
// another thread ending a blocked read at once, refused connections and
// bad URLs as errors.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <httplib.h>

#include "common/error.h"
#include "router/upstream.h"

namespace kvlm::router {
namespace {

using namespace std::chrono_literals;

class UpstreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    http_.Get("/plain", [](const httplib::Request&, httplib::Response& res) { res.set_content("hello", "text/plain"); });
    http_.Post("/echo", [](const httplib::Request& req, httplib::Response& res) {
      res.status = 201;
      res.set_content(req.body + "|" + req.get_header_value("X-Test"), "text/plain");
    });
    http_.Get("/chunks", [this](const httplib::Request&, httplib::Response& res) {
      res.set_chunked_content_provider("text/event-stream", [this](size_t, httplib::DataSink& sink) {
        for (int i = 0; i < 3; ++i) {
          const std::string s = "data: " + std::to_string(i) + "\n\n";
          sink.write(s.data(), s.size());
          std::this_thread::sleep_for(20ms);
        }
        if (hang_) {  // a worker that stops answering (until the test ends)
          std::unique_lock lock(mu_);
          cv_.wait_for(lock, 5s, [this] { return ending_; });
        }
        sink.done();
        return true;
      });
    });
    port_ = http_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { http_.listen_after_bind(); });
    while (!http_.is_running()) std::this_thread::sleep_for(1ms);
  }
  void TearDown() override {
    {
      std::lock_guard lock(mu_);
      ending_ = true;
    }
    cv_.notify_all();
    http_.stop();
    thread_.join();
  }
  WorkerAddress address() const { return parse_worker_url("http://127.0.0.1:" + std::to_string(port_)); }

  httplib::Server http_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<bool> hang_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool ending_ = false;
};

TEST_F(UpstreamTest, ReadsLengthAndChunkedBodiesAndReusesConnections) {
  UpstreamLink link(address());
  for (int i = 0; i < 3; ++i) {
    UpstreamRequest get;
    get.target = "/plain";
    UpstreamExchange x(link, get, {});
    EXPECT_EQ(x.status(), 200);
    EXPECT_EQ(x.header("content-type"), "text/plain");
    EXPECT_EQ(x.read_all(1s), "hello");
  }
  UpstreamRequest post;
  post.method = "POST";
  post.target = "/echo";
  post.body = "abc";
  post.headers = {{"X-Test", "yes"}};
  UpstreamExchange echo(link, post, {});
  EXPECT_EQ(echo.status(), 201);
  EXPECT_EQ(echo.read_all(1s), "abc|yes");

  UpstreamRequest chunks;
  chunks.target = "/chunks";
  UpstreamExchange x(link, chunks, {});
  std::string body;
  int num_reads = 0;
  for (auto r = UpstreamExchange::Read::kData; r != UpstreamExchange::Read::kEnd; r = x.read_body(body, 1s))
    ++num_reads;
  EXPECT_EQ(body, "data: 0\n\ndata: 1\n\ndata: 2\n\n");
  EXPECT_GE(num_reads, 3) << "the chunks came as they were written";
}

TEST_F(UpstreamTest, AnAbortEndsABlockedReadAtOnce) {
  hang_ = true;
  UpstreamLink link(address());
  UpstreamRequest chunks;
  chunks.target = "/chunks";
  UpstreamExchange x(link, chunks, {});
  std::string body;
  while (body.size() < 27) ASSERT_EQ(x.read_body(body, 2s), UpstreamExchange::Read::kData);
  std::thread aborter([&] {
    std::this_thread::sleep_for(50ms);
    link.abort_all();
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(
      {
        for (;;) x.read_body(body, 2s);
      },
      Error);
  aborter.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1500ms) << "the abort, not a read's wait, ended the read";
}

TEST_F(UpstreamTest, IdleReadsSayIdleAndRefusalsAreErrors) {
  hang_ = true;
  UpstreamLink link(address());
  UpstreamRequest chunks;
  chunks.target = "/chunks";
  UpstreamExchange x(link, chunks, {});
  std::string body;
  auto r = UpstreamExchange::Read::kData;
  while (r == UpstreamExchange::Read::kData) r = x.read_body(body, 200ms);
  EXPECT_EQ(r, UpstreamExchange::Read::kIdle);
  {
    std::lock_guard lock(mu_);
    ending_ = true;
  }
  cv_.notify_all();
  http_.stop();
  thread_.join();
  thread_ = std::thread([] {});
  UpstreamLink gone(address());
  UpstreamRequest get;
  get.target = "/plain";
  EXPECT_THROW(UpstreamExchange(gone, get, {}), Error);
}

// abort_all() from a health thread while request threads finish their
// exchanges (returning connections to the pool): no lock taken in the
// opposite order (the TSan phase runs this), and every exchange ends.
TEST_F(UpstreamTest, AbortsRacingExchangesThatEnd) {
  UpstreamLink link(address());
  std::atomic<bool> done{false};
  std::thread health([&] {
    while (!done) {
      link.abort_all();
      std::this_thread::sleep_for(1ms);
    }
  });
  std::vector<std::thread> requests;
  std::atomic<int> num_ended{0};
  for (int t = 0; t < 4; ++t)
    requests.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        try {
          UpstreamRequest get;
          get.target = "/plain";
          UpstreamExchange x(link, get, {});
          x.read_all(1s);
        } catch (const Error&) {
          // aborted: the other outcome
        }
        ++num_ended;
      }
    });
  for (auto& r : requests) r.join();
  done = true;
  health.join();
  EXPECT_EQ(num_ended, 200);
}

// A worker whose chunk framing arrives in pieces: a read with no wait comes
// back idle in the middle of a chunk's size line, its CRLF or the trailers
// (the router's event loop reads so, and must never block on a frame), and
// the body comes out whole once the rest arrives.
TEST(UpstreamFrames, AReadWithNoWaitNeverBlocksOnAHalfReadFrame) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(listener, 1), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  // The pieces, each sent once the client has read everything before it.
  const std::vector<std::string> pieces = {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1", "0\r\n0123456789abcdef\r",
                                           "\n0\r\nX-Trailer: a", "\r\n\r\n"};
  std::atomic<size_t> next{0};
  std::thread worker([&] {
    const int fd = ::accept(listener, nullptr, nullptr);
    char buf[4096];
    ::recv(fd, buf, sizeof(buf), 0);  // the request
    for (size_t i = 0; i < pieces.size(); ++i) {
      while (next.load() < i) std::this_thread::sleep_for(1ms);
      ::send(fd, pieces[i].data(), pieces[i].size(), MSG_NOSIGNAL);
    }
    std::this_thread::sleep_for(100ms);
    ::close(fd);
  });
  UpstreamLink link(parse_worker_url("http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port))));
  next = 1;  // the head and half a size line go out with the first piece
  UpstreamExchange x(link, UpstreamRequest{}, {});
  std::string body;
  int num_idle_mid_frame = 0;
  for (size_t piece = 1; piece < pieces.size(); ++piece) {
    std::this_thread::sleep_for(20ms);  // the last piece has arrived
    while (x.read_body(body, 0ms) == UpstreamExchange::Read::kData) {}
    ++num_idle_mid_frame;  // came back without the frame's rest
    next = piece + 1;
  }
  auto r = UpstreamExchange::Read::kIdle;
  for (int i = 0; i < 200 && r != UpstreamExchange::Read::kEnd; ++i) {
    std::this_thread::sleep_for(5ms);
    r = x.read_body(body, 0ms);
  }
  worker.join();
  ::close(listener);
  EXPECT_EQ(r, UpstreamExchange::Read::kEnd);
  EXPECT_EQ(body, "0123456789abcdef");
  EXPECT_EQ(num_idle_mid_frame, 3);
}

TEST(UpstreamUrl, ParsesWorkerUrls) {
  EXPECT_EQ(parse_worker_url("http://10.0.0.7:8080/").url, "http://10.0.0.7:8080");
  EXPECT_EQ(parse_worker_url("http://worker-3.kvlm:9000").host, "worker-3.kvlm");
  EXPECT_EQ(parse_worker_url("http://[::1]:80").host, "::1");
  EXPECT_THROW(parse_worker_url("https://x:1"), Error);
  EXPECT_THROW(parse_worker_url("http://x"), Error);
  EXPECT_THROW(parse_worker_url("http://x:99999"), Error);
  EXPECT_THROW(parse_worker_url("http://x:80/v1"), Error);
  EXPECT_THROW(parse_worker_url("x:80"), Error);
}

}  // namespace
}  // namespace kvlm::router
