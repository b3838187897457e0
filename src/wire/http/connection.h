// The inside of http_server.h: one connection's coroutine and the pump that
// drives a Producer's answer. Internal to wire/http/ (it includes Asio,
// which nothing above the transport needs to see).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>

#include "wire/http/http_server.h"
#include "wire/http/request_parser.h"

namespace kvlm::http::detail {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Executor = asio::any_io_executor;
// co_await op(..., kTuple) gives (error_code, results...) instead of throwing.
inline constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);

// What every connection of a server shares with it.
struct Shared {
  ServerLimits limits;
  ServerStats stats;
  HttpServer::Handler handler;
  HttpServer::ErrorBody error_body;
  HttpServer::Decorate decorate;
  std::unique_ptr<asio::thread_pool> handler_pool;
  std::unique_ptr<asio::ssl::context> tls;  // null: plain HTTP
  // A connection of `client` has closed (the per-address count).
  std::function<void(const std::string& client)> release_client;
};

// Drives one Producer's answer on its connection's executor: polls it when
// woken (on the executor, or on a handler thread when its polls may block)
// and, for a stream, hands each piece to `send` framed as a chunk, keeping
// at most limits.max_stream_buffer bytes waiting behind a slow reader.
class AnswerPump : public std::enable_shared_from_this<AnswerPump> {
 public:
  // Sends bytes on the connection; calls done(ok) when written (or failed).
  using Send = std::function<void(std::string bytes, std::function<void(bool ok)> done)>;

  AnswerPump(Executor io, Shared& shared, Response& res, bool chunked, Send send);
  ~AnswerPump();
  // Runs until the answer is done (res filled, or the stream written) or
  // dropped. True when done.
  asio::awaitable<bool> run();
  // The client hung up: the producer is cancelled and run() ends.
  void client_gone();

 private:
  friend class PumpWaker;
  void schedule_poll();
  void poll_now(bool on_pool);
  void on_polled(Producer::Progress progress, Clock::time_point wake_at, bool failed);
  void take_output();
  void kick_write();
  void watch_fd(int fd);
  void drop(bool slow_reader);
  void finish(bool ok);

  Executor io_;
  Shared& shared_;
  Response& res_;
  const bool chunked_;
  Send send_;
  asio::steady_timer wake_timer_;
  asio::steady_timer done_signal_;
  std::optional<asio::posix::stream_descriptor> fd_watch_;
  std::string outbox_;
  int pending_fd_ = -1;         // set by the waker during a poll (guarded by the executor's order)
  bool started_ = false, polling_ = false, wake_again_ = false, writing_ = false;
  bool produced_all_ = false, cancel_after_poll_ = false, cancelled_ = false, finished_ = false, ok_ = false;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(Shared& shared, tcp::socket socket, std::string client);
  ~Connection();
  asio::awaitable<void> run();
  Executor executor() { return socket_.get_executor(); }
  // From the connection's executor: closes it (a request being handled sees
  // its client gone; a pump ends).
  void close();

 private:
  enum class ReadResult { kRequest, kClosed };
  asio::awaitable<bool> handshake();
  asio::awaitable<ReadResult> read_request(bool first);
  asio::awaitable<bool> fill(size_t want);
  asio::awaitable<bool> wait_readable();
  asio::awaitable<bool> answer(Request& req);
  // The handler's call, run on the handler pool (co_spawned there by answer).
  asio::awaitable<void> handle_on_pool(Request& req, Response& res);
  asio::awaitable<bool> write_answer(Request& req, Response& res);
  asio::awaitable<boost::system::error_code> write_bytes(const std::string& bytes);
  asio::awaitable<bool> write_all(const std::string& bytes);
  asio::awaitable<void> refuse(int status, const std::string& message, const char* code);
  void send_async(std::string bytes, std::function<void(bool)> done);
  void arm(Clock::time_point deadline, std::optional<Refusal> reason);
  void disarm();
  void watch_hangup(const std::shared_ptr<std::atomic<bool>>& gone);
  std::string head_of(const Request& req, const Response& res, size_t body_size, bool chunked, bool close) const;

  Shared& shared_;
  tcp::socket socket_;
  std::unique_ptr<asio::ssl::stream<tcp::socket&>> tls_;
  std::string client_;
  RequestParser parser_;
  std::string in_;
  asio::steady_timer watchdog_;
  uint64_t watch_generation_ = 0;
  uint64_t hangup_generation_ = 0;
  std::optional<Refusal> deadline_reason_;  // what a deadline passing counts as
  bool timed_out_ = false;
  bool closed_ = false;
  bool handling_ = false;
  std::shared_ptr<AnswerPump> pump_;  // the answer being pumped
  std::shared_ptr<std::atomic<bool>> gone_;  // the request being handled's flag
};

}  // namespace kvlm::http::detail
