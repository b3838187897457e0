// kvlm's HTTP/1.1 server, for kvlm serve and kvlm router: event-driven on
// Boost.Asio (epoll), with TLS on OpenSSL through asio::ssl.
//
// A connection costs a socket and a small buffer, never a thread: each is a
// coroutine on one of the I/O threads, reading its requests with the strict
// parser (request_parser.h) under deadlines — the TLS handshake, the whole
// request head, the body at a minimum rate, the keep-alive wait between
// requests — and caps on the head's size, its header count, the body, the
// connections open, and the connections of one client address. A complete
// request runs its handler on a handler thread; an answer that comes later
// (a stream, a generation) is a Producer (message.h) polled when it is woken,
// so generation never holds a thread either, and a client that stops reading
// a stream is buffered up to a cap, then dropped (its producer cancelled).
//
// Every refusal is counted by reason (stats()); a refused request gets a JSON
// error (`error_body`) and its connection is closed.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "wire/http/message.h"

namespace kvlm::http {

struct ServerLimits {
  // Connections open at once (0: no cap) and from one client address (0: a
  // quarter of max_connections, so no single address can take them all).
  size_t max_connections = 8192;
  size_t max_connections_per_client = 0;
  std::chrono::milliseconds tls_handshake_timeout{10000};
  std::chrono::milliseconds header_timeout{10000};     // from a request's first byte to its head's last
  std::chrono::milliseconds keep_alive_timeout{5000};  // between requests (and before the first one's first byte)
  // The body must come at body_min_rate bytes a second on average once
  // body_timeout has passed since its head was read.
  std::chrono::milliseconds body_timeout{10000};
  int64_t body_min_rate = 16 << 10;
  // A write that makes no progress for this long drops the connection.
  std::chrono::milliseconds write_timeout{30000};
  size_t max_header_bytes = 64 << 10;
  size_t max_headers = 100;
  size_t max_body_bytes = 32 << 20;
  // What a streamed answer may have waiting for a slow reader before the
  // connection is dropped and the answer's work cancelled.
  size_t max_stream_buffer = 1 << 20;
  int io_threads = 1;       // threads running connections
  int handler_threads = 16; // threads running handlers (and producers' blocking polls)
  int retry_after_s = 1;    // the Retry-After of a connection refused for the caps
};

// What the transport refused or dropped, by reason.
enum class Refusal {
  kTooManyConnections,   // past max_connections (answered 503)
  kTooManyFromClient,    // past max_connections_per_client (answered 503)
  kTlsHandshakeTimeout,  // no complete TLS handshake in time
  kTlsHandshakeFailed,
  kHeaderTimeout,        // a request head not complete in time (slowloris)
  kBodyTooSlow,          // a body under the minimum rate
  kHeaderTooLarge,
  kTooManyHeaders,
  kBodyTooLarge,
  kBadRequest,           // malformed request line, header, target, version, Expect
  kBadFraming,           // Content-Length / Transfer-Encoding / chunks
  kSlowReader,           // a write made no progress, or a stream's buffer overflowed
  kCount
};
const char* refusal_name(Refusal r);

struct ServerStats {
  std::atomic<int64_t> num_open{0};        // connections open now
  std::atomic<int64_t> num_accepted{0};    // connections accepted, ever
  std::atomic<int64_t> num_requests{0};    // requests read in full
  std::atomic<int64_t> num_idle_closed{0}; // closed after the keep-alive wait (not a refusal)
  std::array<std::atomic<int64_t>, static_cast<size_t>(Refusal::kCount)> refused{};
  void count(Refusal r) { ++refused[static_cast<size_t>(r)]; }
  int64_t refused_of(Refusal r) const { return refused[static_cast<size_t>(r)].load(); }
};

// Prometheus lines of the transport's counters (kvlm_http_*).
std::string stats_metrics_text(const ServerStats& stats);

class HttpServer {
 public:
  // Runs on a handler thread; fills `res` (or sets a Producer on it).
  using Handler = std::function<void(Request& req, Response& res)>;
  // The JSON body of an error the transport answers itself (a refused
  // request, a connection over the caps): (status, message, code or "").
  using ErrorBody = std::function<std::string(int status, const std::string& message, const std::string& code)>;
  // Called on every answer's head before it is written (CORS headers).
  using Decorate = std::function<void(const Request& req, Response& res)>;

  // TLS when cert_file and key_file are set. Throws Error(kInvalidArgument /
  // kNotFound) naming the flag for one alone, a file that cannot be read, or
  // a pair OpenSSL refuses.
  HttpServer(ServerLimits limits, Handler handler, ErrorBody error_body, const std::string& cert_file = "",
             const std::string& key_file = "");
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  void set_decorate(Decorate decorate);
  // Binds host:port (0: any free port) with SO_REUSEADDR and the system's
  // full backlog. Returns the port; throws Error(kUnavailable).
  int bind(const std::string& host, int port);
  // Serves until stop(); the calling thread is the first I/O thread.
  void run();
  // From any thread: stops accepting, closes every connection (their
  // producers are cancelled) and makes run() return.
  void stop();
  bool tls() const;
  const ServerStats& stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Raises this process's open-file limit to its hard limit (a connection is a
// descriptor) and returns the soft limit now in force.
size_t raise_open_file_limit();

}  // namespace kvlm::http
