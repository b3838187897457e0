// HTTP/1.1 to a worker (kvlm serve): the router's side of every request it
// forwards. Written for what a router needs and an HTTP library in Debian 12
// does not give together: the status and headers before the body (so the
// client's answer can copy them, or the request can go elsewhere), the body
// read incrementally with a deadline per read, keep-alive connections reused,
// and an abort from another thread (a worker the health checker gave up on)
// that makes a blocked read fail at once.
//
// Bodies: Content-Length, chunked, or up to the connection's close. No TLS
// (workers are reached over plain HTTP inside the deployment) and no
// redirects.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvlm::router {

// Where a worker listens: "http://HOST:PORT" (a trailing slash allowed).
// Throws Error(kInvalidArgument) naming the problem for anything else.
struct WorkerAddress {
  std::string host;
  int port = 0;
  std::string url;  // normalised: http://host:port
};
WorkerAddress parse_worker_url(std::string_view url);

class UpstreamExchange;

// A worker's idle keep-alive connections and its exchanges in flight.
class UpstreamLink {
 public:
  explicit UpstreamLink(WorkerAddress address, size_t max_idle = 64);
  ~UpstreamLink();
  UpstreamLink(const UpstreamLink&) = delete;
  UpstreamLink& operator=(const UpstreamLink&) = delete;

  const WorkerAddress& address() const { return address_; }
  // Aborts every exchange in flight (they fail at their next read) and
  // closes the idle connections: the worker is gone or frozen.
  void abort_all();

 private:
  friend class UpstreamExchange;
  // A connected socket: an idle one (reused true) or a new one. Throws
  // Error(kUnavailable) when the connection fails within `timeout`.
  int acquire(std::chrono::milliseconds timeout, bool* reused);
  void release(int fd);
  void enter(UpstreamExchange* x);
  void leave(UpstreamExchange* x);

  const WorkerAddress address_;
  const size_t max_idle_;
  std::mutex mu_;
  std::vector<int> idle_;
  std::set<UpstreamExchange*> in_flight_;
};

struct UpstreamRequest {
  std::string method = "GET";
  std::string target = "/";  // path and query
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};

struct UpstreamTimeouts {
  std::chrono::milliseconds connect{2000};
  std::chrono::milliseconds send{10000};
  std::chrono::milliseconds head{600000};  // until the status line and headers have come
};

// One request and its response. Every failure (connect, reset, a read past
// its deadline, an abort) throws Error(kUnavailable) with what happened.
class UpstreamExchange {
 public:
  // Sends the request and reads the response's status line and headers. A
  // reused connection that the worker had closed meanwhile is replaced by a
  // new one once, before any byte of the response.
  UpstreamExchange(UpstreamLink& link, const UpstreamRequest& request, const UpstreamTimeouts& timeouts);
  ~UpstreamExchange();  // the connection goes back to the pool if the body was read to its end
  UpstreamExchange(const UpstreamExchange&) = delete;
  UpstreamExchange& operator=(const UpstreamExchange&) = delete;

  int status() const { return status_; }
  // When the request's last byte went out.
  std::chrono::steady_clock::time_point sent_at() const { return sent_at_; }
  // A response header (name in any case); "" when absent.
  std::string header(std::string_view name) const;

  enum class Read { kData, kEnd, kIdle };
  // Appends the body's next bytes to `out`, waiting up to `wait` for one:
  // kData (bytes appended), kEnd (the body has ended; nothing appended) or
  // kIdle (nothing came in time; call again). With a wait of 0 it never
  // blocks, not even on a chunk's half-read framing (an event loop's read).
  Read read_body(std::string& out, std::chrono::milliseconds wait);
  // The rest of the body; a wait of `idle_timeout` without a byte is a failure.
  std::string read_all(std::chrono::milliseconds idle_timeout);

  // From any thread: the exchange fails at its next (or current) read.
  void abort();
  // The connection's socket, for an event loop to wait on (read_body with no
  // wait once it is readable). Valid while the exchange lives.
  int fd() const { return fd_; }

 private:
  void send(const UpstreamRequest& request, std::chrono::milliseconds timeout);
  void read_head(std::chrono::milliseconds timeout);
  // Reads more bytes into in_: kData, kEnd (the connection's end), kIdle.
  Read fill(std::chrono::milliseconds timeout);
  // fill() where the body needs more bytes: a failure at the end or past the wait.
  void need(std::chrono::milliseconds timeout);
  Read take_chunked(std::string& out, std::chrono::milliseconds timeout);
  Read take_trailers(std::chrono::milliseconds timeout);
  // More bytes for a frame begun: need(wait) when waiting is allowed; with
  // no wait, false when none have come (the caller returns kIdle, its
  // state kept for the next read).
  bool more(std::chrono::milliseconds wait);
  [[noreturn]] void fail(const std::string& what) const;

  UpstreamLink& link_;
  int fd_ = -1;
  std::mutex fd_mu_;  // fd_'s close against abort() from another thread
  std::atomic<bool> aborted_{false};
  int status_ = 0;
  std::chrono::steady_clock::time_point sent_at_{};
  std::vector<std::pair<std::string, std::string>> headers_;  // names lowercased
  std::string in_;       // bytes read and not yet consumed
  enum class Body { kLength, kChunked, kUntilClose } body_ = Body::kLength;
  int64_t remaining_ = 0;  // kLength: bytes left; kChunked: of the current chunk
  bool chunk_needs_crlf_ = false;
  bool in_trailers_ = false;  // the last chunk has come; its trailers are being read
  bool done_ = false;       // the body has ended
  bool keep_alive_ = true;
};

}  // namespace kvlm::router
