// One connection: its requests read under deadlines, each answered by the
// handler on a handler thread, then written; a Producer's answer through an
// AnswerPump (answer_pump.cpp).
#include "wire/http/connection.h"

#include <sys/socket.h>

#include <cerrno>
#include <tuple>

#include <fmt/format.h>

#include "common/log.h"

namespace kvlm::http::detail {
namespace {

constexpr size_t kHeadRead = 8 << 10;      // a read while the head comes
constexpr size_t kMinBodyRead = 16 << 10;  // a read of a body: at least, and at most kMaxBodyRead
constexpr size_t kMaxBodyRead = 256 << 10;
// An error answer the transport writes before closing: this long to go out,
// then the client's unread bytes are drained this long (so the close does
// not reset the connection before the client has read the answer).
constexpr auto kRefusalWrite = std::chrono::seconds(2);
constexpr auto kLinger = std::chrono::seconds(1);
constexpr size_t kMaxLingerBytes = 256 << 10;

Refusal refusal_of(std::string_view reason) {
  if (reason == "header_too_large") return Refusal::kHeaderTooLarge;
  if (reason == "too_many_headers") return Refusal::kTooManyHeaders;
  if (reason == "body_too_large") return Refusal::kBodyTooLarge;
  if (reason == "bad_framing") return Refusal::kBadFraming;
  return Refusal::kBadRequest;
}

}  // namespace

Connection::Connection(Shared& shared, tcp::socket socket, std::string client)
    : shared_(shared),
      socket_(std::move(socket)),
      client_(std::move(client)),
      parser_(ParseLimits{shared.limits.max_header_bytes, shared.limits.max_headers, shared.limits.max_body_bytes}),
      watchdog_(socket_.get_executor()) {
  if (shared_.tls) tls_ = std::make_unique<asio::ssl::stream<tcp::socket&>>(socket_, *shared_.tls);
}

Connection::~Connection() {
  --shared_.stats.num_open;
  if (shared_.release_client) shared_.release_client(client_);
}

void Connection::close() {
  if (closed_) return;
  closed_ = true;
  if (gone_) gone_->store(true);
  if (pump_) pump_->client_gone();
  boost::system::error_code ec;
  watchdog_.cancel();
  socket_.close(ec);
}

void Connection::arm(Clock::time_point deadline, std::optional<Refusal> reason) {
  deadline_reason_ = reason;
  timed_out_ = false;
  const uint64_t generation = ++watch_generation_;
  watchdog_.expires_at(deadline);
  watchdog_.async_wait([self = weak_from_this(), generation](boost::system::error_code ec) {
    auto c = self.lock();
    if (!c || ec || generation != c->watch_generation_) return;
    c->timed_out_ = true;
    boost::system::error_code ignored;
    c->socket_.cancel(ignored);  // the read or write waiting fails now
  });
}

void Connection::disarm() {
  ++watch_generation_;
  watchdog_.cancel();
}

asio::awaitable<bool> Connection::handshake() {
  arm(Clock::now() + shared_.limits.tls_handshake_timeout, Refusal::kTlsHandshakeTimeout);
  auto [ec] = co_await tls_->async_handshake(asio::ssl::stream_base::server, kTuple);
  disarm();
  if (!ec) co_return true;
  shared_.stats.count(timed_out_ ? Refusal::kTlsHandshakeTimeout : Refusal::kTlsHandshakeFailed);
  co_return false;
}

asio::awaitable<bool> Connection::fill(size_t want) {
  const size_t old = in_.size();
  in_.resize(old + want);
  auto buffer = asio::buffer(in_.data() + old, want);
  boost::system::error_code ec;
  size_t n = 0;
  if (tls_) {
    std::tie(ec, n) = co_await tls_->async_read_some(buffer, kTuple);
  } else {
    std::tie(ec, n) = co_await socket_.async_read_some(buffer, kTuple);
  }
  in_.resize(old + n);
  co_return !ec && n > 0;
}

// Waits for the next request's first byte without holding a buffer: an idle
// connection is a socket and this coroutine's frame. (Over TLS, a record may
// already wait inside the TLS stream, so it reads instead.)
asio::awaitable<bool> Connection::wait_readable() {
  if (tls_) {
    const bool got = co_await fill(kHeadRead);
    co_return got;
  }
  auto [ec] = co_await socket_.async_wait(tcp::socket::wait_read, kTuple);
  co_return !ec;
}

asio::awaitable<Connection::ReadResult> Connection::read_request(bool first) {
  const ServerLimits& l = shared_.limits;
  const auto opened = Clock::now();
  // Before waiting: a kept-alive connection holds nothing of its last
  // request, not its body nor its API key's concurrency slot (req.key_ticket).
  parser_.reset();
  if (in_.empty()) {
    // A new connection has header_timeout for its first request; a kept-alive
    // one waits keep_alive_timeout for the next.
    arm(opened + (first ? l.header_timeout : l.keep_alive_timeout),
        first ? std::optional(Refusal::kHeaderTimeout) : std::nullopt);
    if (!co_await wait_readable()) {
      if (timed_out_ && deadline_reason_) shared_.stats.count(*deadline_reason_);
      if (timed_out_ && !deadline_reason_) ++shared_.stats.num_idle_closed;
      co_return ReadResult::kClosed;
    }
  }
  const auto head_deadline = (first ? opened : Clock::now()) + l.header_timeout;
  Clock::time_point body_start{};
  for (;;) {
    const RequestParser::State state = parser_.feed(in_);
    if (state == RequestParser::State::kComplete) break;
    if (state == RequestParser::State::kError) {
      const ParseError& e = parser_.error();
      shared_.stats.count(refusal_of(e.reason));
      co_await refuse(e.status, e.message, "");
      co_return ReadResult::kClosed;
    }
    if (state == RequestParser::State::kHeadDone) {
      body_start = Clock::now();
      if (parser_.expects_continue() && in_.empty()) {
        static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
        if (!co_await write_all(kContinue)) co_return ReadResult::kClosed;
      }
      continue;
    }
    size_t want = kHeadRead;
    if (!parser_.head_done()) {
      arm(head_deadline, Refusal::kHeaderTimeout);
    } else {
      // The body's deadline moves with what has come: body_timeout, then
      // body_min_rate bytes a second on average.
      const auto allowed = std::chrono::duration<double>(static_cast<double>(parser_.body_received()) /
                                                         static_cast<double>(std::max<int64_t>(l.body_min_rate, 1)));
      arm(body_start + l.body_timeout + std::chrono::duration_cast<Clock::duration>(allowed), Refusal::kBodyTooSlow);
      want = std::clamp(static_cast<size_t>(parser_.body_remaining()), kMinBodyRead, kMaxBodyRead);
    }
    if (!co_await fill(want)) {
      if (timed_out_ && deadline_reason_) {
        shared_.stats.count(*deadline_reason_);
        // (No temporaries in a co_await expression: GCC 12 destroys some twice.)
        std::string message = *deadline_reason_ == Refusal::kHeaderTimeout
                                  ? fmt::format("the request head did not come within {} s",
                                                std::chrono::duration<double>(l.header_timeout).count())
                                  : fmt::format("the request body came slower than {} bytes a second", l.body_min_rate);
        if (!tls_) co_await refuse(408, message, "");
      }
      co_return ReadResult::kClosed;
    }
  }
  disarm();
  ++shared_.stats.num_requests;
  if (in_.empty()) std::string().swap(in_);  // an idle connection holds no buffer
  co_return ReadResult::kRequest;
}

// All of `bytes` written, over TLS or not; the write's error ("" on success).
asio::awaitable<boost::system::error_code> Connection::write_bytes(const std::string& bytes) {
  boost::system::error_code ec;
  size_t n = 0;
  if (tls_) {
    std::tie(ec, n) = co_await asio::async_write(*tls_, asio::buffer(bytes), kTuple);
  } else {
    std::tie(ec, n) = co_await asio::async_write(socket_, asio::buffer(bytes), kTuple);
  }
  co_return ec;
}

asio::awaitable<bool> Connection::write_all(const std::string& bytes) {
  arm(Clock::now() + shared_.limits.write_timeout, Refusal::kSlowReader);
  const boost::system::error_code ec = co_await write_bytes(bytes);
  disarm();
  if (ec && timed_out_) shared_.stats.count(Refusal::kSlowReader);
  co_return !ec;
}

void Connection::send_async(std::string bytes, std::function<void(bool)> done) {
  auto buffer = std::make_shared<std::string>(std::move(bytes));
  arm(Clock::now() + shared_.limits.write_timeout, Refusal::kSlowReader);
  auto on_written = [self = shared_from_this(), buffer, done = std::move(done)](boost::system::error_code ec, size_t) {
    self->disarm();
    if (ec && self->timed_out_) self->shared_.stats.count(Refusal::kSlowReader);
    done(!ec);
  };
  if (tls_) asio::async_write(*tls_, asio::buffer(*buffer), std::move(on_written));
  else asio::async_write(socket_, asio::buffer(*buffer), std::move(on_written));
}

// Answers a refused request (status, JSON error) and closes: the write gets
// kRefusalWrite, then what the client still sends is read and dropped for
// kLinger, so its unread bytes do not turn the close into a reset that
// destroys the answer.
asio::awaitable<void> Connection::refuse(int status, const std::string& message, const char* code) {
  Response res;
  res.status = status;
  res.set_content(shared_.error_body(status, message, code), "application/json");
  if (parser_.head_done() && shared_.decorate) shared_.decorate(parser_.request(), res);
  const std::string bytes = head_of(parser_.request(), res, res.body.size(), false, true) + res.body;
  arm(Clock::now() + kRefusalWrite, std::nullopt);
  const boost::system::error_code ec = co_await write_bytes(bytes);
  if (ec || tls_) co_return;
  boost::system::error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_send, ignored);
  arm(Clock::now() + kLinger, std::nullopt);
  std::string sink(4096, '\0');
  for (size_t drained = 0; drained < kMaxLingerBytes;) {
    auto [read_ec, got] = co_await socket_.async_read_some(asio::buffer(sink), kTuple);
    if (read_ec) break;
    drained += got;
  }
  disarm();
}

asio::awaitable<void> Connection::run() {
  auto self = shared_from_this();
  try {
    if (!tls_ || co_await handshake()) {
      for (bool first = true; !closed_; first = false) {
        if (co_await read_request(first) != ReadResult::kRequest) break;
        const bool keep_alive = co_await answer(parser_.request());
        if (!keep_alive) break;
      }
    }
  } catch (const std::exception& e) {
    log_warn("http: connection from {} failed: {}", client_, e.what());
  }
  close();
}

namespace {

// The handler's call, its failures answered 500 (a handler answers its own
// errors; this is the transport's last resort).
void call_handler(Shared& shared, Request& req, Response& res) {
  try {
    shared.handler(req, res);
  } catch (const std::exception& e) {
    log_error("http: {} {}: unhandled: {}", req.method, req.path, e.what());
    res = Response{};
    res.status = 500;
    res.set_content(shared.error_body(500, "internal error", ""), "application/json");
  }
}

bool asks_to_close(const Response& res) {
  const std::string* c = find_header(res.headers, "Connection");
  return res.close || (c && iequals(*c, "close"));
}

}  // namespace

asio::awaitable<void> Connection::handle_on_pool(Request& req, Response& res) {
  call_handler(shared_, req, res);
  co_return;
}

// Answers one request; false when the connection must close after it.
asio::awaitable<bool> Connection::answer(Request& req) {
  boost::system::error_code ec;
  const tcp::endpoint remote = socket_.remote_endpoint(ec), local = socket_.local_endpoint(ec);
  req.remote_addr = client_;
  req.remote_port = remote.port();
  req.local_port = local.port();
  gone_ = req.gone;
  handling_ = true;
  watch_hangup(req.gone);
  Response res;
  // A named awaitable, not a lambda: a lambda held across the co_await gave
  // the coroutine frame a field of a type without linkage (GCC 12
  // -Wsubobject-linkage).
  asio::awaitable<void> handling = handle_on_pool(req, res);
  co_await asio::co_spawn(*shared_.handler_pool, std::move(handling), asio::use_awaitable);
  bool keep_alive = false;
  if (!closed_) keep_alive = co_await write_answer(req, res);
  handling_ = false;
  ++hangup_generation_;
  if (!closed_) socket_.cancel(ec);  // the hang-up watch
  gone_.reset();
  co_return keep_alive && !closed_;
}

asio::awaitable<bool> Connection::write_answer(Request& req, Response& res) {
  const bool head_only = req.method == "HEAD";
  if (res.later == Response::Later::kWhole && res.producer) {
    pump_ = std::make_shared<AnswerPump>(socket_.get_executor(), shared_, res, false, nullptr);
    const bool done = co_await pump_->run();
    pump_.reset();
    if (!done) co_return false;
  }
  if (shared_.decorate) shared_.decorate(req, res);
  bool close_after = !parser_.keep_alive() || asks_to_close(res);
  if (res.later != Response::Later::kStream || !res.producer) {
    std::string bytes = head_of(req, res, res.body.size(), false, close_after);
    if (!head_only) bytes += res.body;
    const bool written = co_await write_all(bytes);
    co_return written && !close_after;
  }
  // A stream: its head now, its body as the producer makes it (chunked; an
  // HTTP/1.0 client reads to the close).
  const bool chunked = req.minor_version >= 1;
  close_after = close_after || !chunked;
  const std::string head = head_of(req, res, 0, chunked, close_after);
  if (!co_await write_all(head)) co_return false;
  if (head_only) {
    res.producer->cancel();
    co_return !close_after;
  }
  pump_ = std::make_shared<AnswerPump>(socket_.get_executor(), shared_, res, chunked,
                                       [this](std::string bytes, std::function<void(bool)> done) {
                                         send_async(std::move(bytes), std::move(done));
                                       });
  const bool done = co_await pump_->run();
  pump_.reset();
  co_return done && !close_after;
}

std::string Connection::head_of(const Request& req, const Response& res, size_t body_size, bool chunked,
                                bool close) const {
  std::string out = fmt::format("HTTP/1.{} {} {}\r\n", req.minor_version == 0 ? 0 : 1, res.status,
                                reason_phrase(res.status));
  if (!res.content_type.empty()) out += "Content-Type: " + res.content_type + "\r\n";
  for (const Header& h : res.headers) {
    if (iequals(h.name, "Connection") || iequals(h.name, "Content-Length") || iequals(h.name, "Transfer-Encoding"))
      continue;  // the transport's own
    out += h.name + ": " + h.value + "\r\n";
  }
  if (chunked) {
    out += "Transfer-Encoding: chunked\r\n";
  } else if (res.later != Response::Later::kStream) {
    out += fmt::format("Content-Length: {}\r\n", body_size);
  }
  if (close) {
    out += "Connection: close\r\n";
  } else if (req.minor_version == 0) {
    out += "Connection: keep-alive\r\n";
  }
  return out + "\r\n";
}

// Watches the connection while its request is handled: a peer that closes
// (read end-of-file, or a reset) marks the request gone and stops its
// answer's work at once, not at its first write. Bytes from the client (a
// pipelined request, a TLS record) end the watch: they are the next request's.
void Connection::watch_hangup(const std::shared_ptr<std::atomic<bool>>& gone) {
  const uint64_t generation = ++hangup_generation_;
  socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this(), generation, gone](boost::system::error_code ec) {
    if (ec || generation != self->hangup_generation_ || !self->handling_ || self->closed_) return;
    char c = 0;
    const ssize_t n = ::recv(self->socket_.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) return;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return self->watch_hangup(gone);
    gone->store(true);
    if (self->pump_) self->pump_->client_gone();
  });
}

}  // namespace kvlm::http::detail
