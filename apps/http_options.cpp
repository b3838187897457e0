#include "apps/http_options.h"

#include "common/log.h"

namespace kvlm::apps {
namespace {

// Descriptors kept free of client connections: model files, workers, Redis,
// the process's own.
constexpr size_t kReservedFiles = 256;

void add_ms(CLI::App& app, const std::string& name, int64_t& value, const std::string& help) {
  app.add_option(name, value, help)->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{3600} * 1000));
}

}  // namespace

void add_http_options(CLI::App& app, http::ServerLimits& l, HttpFlags& f, const std::string& threads_help) {
  app.add_option("--max-connections", l.max_connections,
                 "client connections open at once; past it 503 + Retry-After (0: no cap)")
      ->capture_default_str();
  app.add_option("--max-connections-per-client", l.max_connections_per_client,
                 "connections open at once from one client address; past it 503 (0: a quarter of --max-connections)")
      ->capture_default_str();
  app.add_option("--max-request-bytes", l.max_body_bytes, "largest request body; larger gets 413")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1024}, size_t{1} << 34));
  app.add_option("--max-header-bytes", l.max_header_bytes, "largest request head (request line and headers); 431")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1024}, size_t{1} << 24));
  app.add_option("--max-headers", l.max_headers, "most headers in a request; past it 431")
      ->capture_default_str()
      ->check(CLI::Range(size_t{8}, size_t{10000}));
  add_ms(app, "--header-timeout-ms", f.header_timeout_ms,
         "a request's head must arrive within this (from its first byte; a new connection's from the connect); 408");
  add_ms(app, "--keep-alive-timeout-ms", f.keep_alive_timeout_ms, "an idle kept-alive connection is closed after this");
  add_ms(app, "--tls-handshake-timeout-ms", f.tls_handshake_timeout_ms, "a TLS handshake must finish within this");
  add_ms(app, "--body-timeout-ms", f.body_timeout_ms,
         "a request body gets this long, then must keep coming at --body-min-rate on average; 408");
  app.add_option("--body-min-rate", l.body_min_rate, "bytes a second a request body must come at after --body-timeout-ms")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  add_ms(app, "--write-timeout-ms", f.write_timeout_ms, "a write to a client that makes no progress this long drops it");
  app.add_option("--max-stream-buffer", l.max_stream_buffer,
                 "bytes of a stream waiting for a slow reader; past it the client is dropped and its request cancelled")
      ->capture_default_str()
      ->check(CLI::Range(size_t{4096}, size_t{1} << 32));
  app.add_option("--http-threads", l.handler_threads, "threads that run request handlers (" + threads_help + ")")
      ->capture_default_str();
  app.add_option("--http-io-threads", l.io_threads, "threads that run the connections (event loops)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
}

void apply_http_flags(const HttpFlags& f, http::ServerLimits& l) {
  using Ms = std::chrono::milliseconds;
  l.header_timeout = Ms(f.header_timeout_ms);
  l.keep_alive_timeout = Ms(f.keep_alive_timeout_ms);
  l.tls_handshake_timeout = Ms(f.tls_handshake_timeout_ms);
  l.body_timeout = Ms(f.body_timeout_ms);
  l.write_timeout = Ms(f.write_timeout_ms);
  const size_t files = http::raise_open_file_limit();
  const size_t room = files > 2 * kReservedFiles ? files - kReservedFiles : files / 2;
  if (l.max_connections == 0 || l.max_connections > room) {
    log_warn("--max-connections {} does not fit the open-file limit ({}): using {}", l.max_connections, files, room);
    l.max_connections = room;
  }
}

}  // namespace kvlm::apps
