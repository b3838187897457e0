#include "wire/http/http_server.h"

#include <sys/resource.h>

#include <condition_variable>
#include <fstream>
#include <mutex>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>

#include "common/error.h"
#include "common/log.h"
#include "wire/http/connection.h"

namespace kvlm::http {

using detail::asio::ip::tcp;
using detail::kTuple;
namespace asio = detail::asio;

namespace {

// Connections refused for the caps are answered at once; this many at a
// time, the rest closed without an answer (a flood must not cost more).
constexpr int64_t kMaxAnswered = 256;
constexpr auto kAcceptPause = std::chrono::milliseconds(50);  // after the process ran out of descriptors
constexpr auto kStopGrace = std::chrono::seconds(3);          // stop(): connections this long to close

void check_readable(const std::string& path, const char* flag) {
  std::ifstream in(path);
  if (!in) throw_error(ErrorCode::kNotFound, "{} {}: cannot read it", flag, path);
}

std::unique_ptr<asio::ssl::context> make_tls(const std::string& cert_file, const std::string& key_file) {
  if (cert_file.empty() && key_file.empty()) return nullptr;
  if (cert_file.empty() || key_file.empty())
    throw_error(ErrorCode::kInvalidArgument, "--ssl-cert-file and --ssl-key-file go together (HTTPS needs both)");
  check_readable(cert_file, "--ssl-cert-file");
  check_readable(key_file, "--ssl-key-file");
  auto tls = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_server);
  try {
    tls->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                     asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 | asio::ssl::context::no_tlsv1_1 |
                     asio::ssl::context::single_dh_use);
    tls->use_certificate_chain_file(cert_file);
    tls->use_private_key_file(key_file, asio::ssl::context::pem);
  } catch (const boost::system::system_error&) {
    throw_error(ErrorCode::kInvalidArgument,
                "--ssl-cert-file {} and --ssl-key-file {}: OpenSSL cannot load them as a PEM certificate and its "
                "private key",
                cert_file, key_file);
  }
  if (SSL_CTX_check_private_key(tls->native_handle()) != 1)
    throw_error(ErrorCode::kInvalidArgument, "--ssl-key-file {} is not the private key of --ssl-cert-file {}",
                key_file, cert_file);
  // An idle TLS connection gives its record buffers back.
  SSL_CTX_set_mode(tls->native_handle(), SSL_MODE_RELEASE_BUFFERS);
  return tls;
}

}  // namespace

const char* refusal_name(Refusal r) {
  switch (r) {
    case Refusal::kTooManyConnections: return "too_many_connections";
    case Refusal::kTooManyFromClient: return "too_many_client_connections";
    case Refusal::kTlsHandshakeTimeout: return "tls_handshake_timeout";
    case Refusal::kTlsHandshakeFailed: return "tls_handshake_failed";
    case Refusal::kHeaderTimeout: return "header_timeout";
    case Refusal::kBodyTooSlow: return "body_too_slow";
    case Refusal::kHeaderTooLarge: return "header_too_large";
    case Refusal::kTooManyHeaders: return "too_many_headers";
    case Refusal::kBodyTooLarge: return "body_too_large";
    case Refusal::kBadRequest: return "bad_request";
    case Refusal::kBadFraming: return "bad_framing";
    case Refusal::kSlowReader: return "slow_reader";
    case Refusal::kCount: break;
  }
  return "unknown";
}

namespace {

// One metric's HELP and TYPE lines and its single sample.
std::string single_metric(const char* name, const char* type, const char* help, int64_t value) {
  return fmt::format("# HELP {0} {1}\n# TYPE {0} {2}\n{0} {3}\n", name, help, type, value);
}

}  // namespace

std::string stats_metrics_text(const ServerStats& s) {
  std::string out = single_metric("kvlm_http_connections_open", "gauge", "HTTP connections open now", s.num_open.load());
  out += single_metric("kvlm_http_connections_accepted_total", "counter", "HTTP connections accepted", s.num_accepted.load());
  out += single_metric("kvlm_http_requests_read_total", "counter", "HTTP requests read in full", s.num_requests.load());
  out += single_metric("kvlm_http_idle_closed_total", "counter", "kept-alive connections closed after the keep-alive wait",
                s.num_idle_closed.load());
  out += "# HELP kvlm_http_refused_total connections and requests the transport refused or dropped, by reason\n"
         "# TYPE kvlm_http_refused_total counter\n";
  for (size_t i = 0; i < static_cast<size_t>(Refusal::kCount); ++i)
    out += fmt::format("kvlm_http_refused_total{{reason=\"{}\"}} {}\n", refusal_name(static_cast<Refusal>(i)),
                       s.refused[i].load());
  return out;
}

size_t raise_open_file_limit() {
  rlimit l{};
  if (::getrlimit(RLIMIT_NOFILE, &l) != 0) return 1024;
  if (l.rlim_cur < l.rlim_max) {
    rlimit raised = l;
    raised.rlim_cur = l.rlim_max == RLIM_INFINITY ? rlim_t{1} << 20 : l.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) l = raised;
  }
  return static_cast<size_t>(l.rlim_cur);
}

struct HttpServer::Impl {
  detail::Shared shared;
  std::atomic<bool> stopping{false};
  std::atomic<bool> running{false};
  std::atomic<int64_t> num_answering_refusals{0};
  size_t next_io = 0;
  size_t per_client_cap = 0;
  std::mutex mu;
  std::unordered_map<std::string, size_t> per_client;  // open connections by client address
  std::unordered_map<detail::Connection*, std::weak_ptr<detail::Connection>> live;
  std::condition_variable stopped_cv;
  bool run_done = false;
  // Destroyed first (members go in reverse): the I/O contexts' pending
  // coroutines hold connections, whose destructors use what is above.
  std::vector<std::unique_ptr<asio::io_context>> ios;
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> guards;
  std::unique_ptr<tcp::acceptor> acceptor;
  std::thread stop_watch;

  asio::awaitable<void> accept_loop();
  void admit(tcp::socket socket, asio::io_context& io);
  void refuse_connection(tcp::socket socket, Refusal why, const std::string& message, asio::io_context& io);
  void close_all();
};

void HttpServer::Impl::admit(tcp::socket socket, asio::io_context& io) {
  boost::system::error_code ec;
  const tcp::endpoint remote = socket.remote_endpoint(ec);
  if (ec) return;  // gone already
  socket.set_option(tcp::no_delay(true), ec);  // an SSE chunk goes out at once, not after the last one's ACK
  const std::string client = remote.address().to_string();
  ++shared.stats.num_accepted;
  const ServerLimits& l = shared.limits;
  if (l.max_connections > 0 && static_cast<size_t>(shared.stats.num_open.load()) >= l.max_connections)
    return refuse_connection(std::move(socket), Refusal::kTooManyConnections,
                             fmt::format("the server has {} connections open, its limit (--max-connections); retry later",
                                         l.max_connections),
                             io);
  {
    std::lock_guard lock(mu);
    size_t& n = per_client[client];
    if (per_client_cap > 0 && n >= per_client_cap) {
      return refuse_connection(std::move(socket), Refusal::kTooManyFromClient,
                               fmt::format("{} connections are open from this address, the limit of one client "
                                           "(--max-connections-per-client); retry later",
                                           per_client_cap),
                               io);
    }
    ++n;
  }
  ++shared.stats.num_open;
  auto connection = std::make_shared<detail::Connection>(shared, std::move(socket), client);
  {
    std::lock_guard lock(mu);
    live.emplace(connection.get(), connection);
  }
  asio::co_spawn(io, [this, connection]() -> asio::awaitable<void> {
    co_await connection->run();
    std::lock_guard lock(mu);
    live.erase(connection.get());
  }, asio::detached);
}

// Past a cap: a plain-HTTP client gets a 503 with Retry-After (when few
// such answers are under way) and the close; a TLS client only the close.
void HttpServer::Impl::refuse_connection(tcp::socket socket, Refusal why, const std::string& message,
                                         asio::io_context& io) {
  shared.stats.count(why);
  if (shared.tls || num_answering_refusals.load() >= kMaxAnswered) return;  // the socket closes here
  const std::string body = shared.error_body(503, message, refusal_name(why));
  std::string bytes = fmt::format(
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: {}\r\nRetry-After: "
      "{}\r\nConnection: close\r\n\r\n{}",
      body.size(), shared.limits.retry_after_s, body);
  ++num_answering_refusals;
  auto s = std::make_shared<tcp::socket>(std::move(socket));
  asio::co_spawn(io, [this, s, bytes = std::move(bytes)]() -> asio::awaitable<void> {
    asio::steady_timer deadline(co_await asio::this_coro::executor);
    deadline.expires_after(std::chrono::seconds(1));
    deadline.async_wait([s](boost::system::error_code ec) {
      boost::system::error_code ignored;
      if (!ec) s->close(ignored);
    });
    auto [ec, n] = co_await asio::async_write(*s, asio::buffer(bytes), kTuple);
    boost::system::error_code ignored;
    s->shutdown(tcp::socket::shutdown_send, ignored);
    std::array<char, 1024> sink{};
    while (!ec && s->is_open()) std::tie(ec, n) = co_await s->async_read_some(asio::buffer(sink), kTuple);
    deadline.cancel();
    s->close(ignored);
    --num_answering_refusals;
  }, asio::detached);
}

asio::awaitable<void> HttpServer::Impl::accept_loop() {
  for (;;) {
    asio::io_context& io = *ios[next_io++ % ios.size()];
    auto [ec, socket] = co_await acceptor->async_accept(io, kTuple);
    if (stopping) co_return;
    if (ec == asio::error::operation_aborted) co_return;
    if (ec) {
      log_warn("http: accept failed: {}", ec.message());
      if (ec == asio::error::no_descriptors || ec.value() == EMFILE || ec.value() == ENFILE) {
        asio::steady_timer pause(co_await asio::this_coro::executor, kAcceptPause);
        co_await pause.async_wait(kTuple);
      }
      continue;
    }
    admit(tcp::socket(std::move(socket)), io);
  }
}

void HttpServer::Impl::close_all() {
  std::vector<std::shared_ptr<detail::Connection>> open;
  {
    std::lock_guard lock(mu);
    for (auto& [raw, weak] : live)
      if (auto c = weak.lock()) open.push_back(std::move(c));
  }
  for (auto& c : open) asio::post(c->executor(), [c] { c->close(); });
}

HttpServer::HttpServer(ServerLimits limits, Handler handler, ErrorBody error_body, const std::string& cert_file,
                       const std::string& key_file)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.shared.tls = make_tls(cert_file, key_file);
  s.shared.limits = limits;
  s.shared.handler = std::move(handler);
  s.shared.error_body = std::move(error_body);
  s.shared.handler_pool = std::make_unique<asio::thread_pool>(static_cast<size_t>(std::max(1, limits.handler_threads)));
  s.per_client_cap = limits.max_connections_per_client > 0 ? limits.max_connections_per_client
                                                           : limits.max_connections / 4;
  s.shared.release_client = [&s](const std::string& client) {
    std::lock_guard lock(s.mu);
    auto it = s.per_client.find(client);
    if (it != s.per_client.end() && --it->second == 0) s.per_client.erase(it);
  };
  for (int i = 0; i < std::max(1, limits.io_threads); ++i) {
    s.ios.push_back(std::make_unique<asio::io_context>(1));
    s.guards.push_back(asio::make_work_guard(*s.ios.back()));
  }
}

HttpServer::~HttpServer() {
  stop();
  if (impl_->stop_watch.joinable()) impl_->stop_watch.join();
  impl_->shared.handler_pool->join();
}

void HttpServer::set_decorate(Decorate decorate) { impl_->shared.decorate = std::move(decorate); }

bool HttpServer::tls() const { return impl_->shared.tls != nullptr; }

const ServerStats& HttpServer::stats() const { return impl_->shared.stats; }

int HttpServer::bind(const std::string& host, int port) {
  Impl& s = *impl_;
  try {
    tcp::resolver resolver(*s.ios[0]);
    const auto endpoints = resolver.resolve(host, std::to_string(port), tcp::resolver::passive);
    const tcp::endpoint endpoint = *endpoints.begin();
    s.acceptor = std::make_unique<tcp::acceptor>(*s.ios[0]);
    s.acceptor->open(endpoint.protocol());
    // SO_REUSEADDR only: SO_REUSEPORT would let a second server share the port.
    s.acceptor->set_option(tcp::acceptor::reuse_address(true));
    s.acceptor->bind(endpoint);
    s.acceptor->listen(asio::socket_base::max_listen_connections);
    return s.acceptor->local_endpoint().port();
  } catch (const boost::system::system_error& e) {
    s.acceptor.reset();
    throw_error(ErrorCode::kUnavailable, "cannot listen on {}:{} (in use, or not an address of this machine: {})", host,
                port, e.code().message());
  }
}

void HttpServer::run() {
  Impl& s = *impl_;
  if (!s.acceptor) throw_error(ErrorCode::kUnavailable, "the HTTP server was not bound");
  if (s.stopping || s.running.exchange(true)) return;
  asio::co_spawn(*s.ios[0], s.accept_loop(), asio::detached);
  std::vector<std::thread> threads;
  for (size_t i = 1; i < s.ios.size(); ++i) threads.emplace_back([&s, i] { s.ios[i]->run(); });
  s.ios[0]->run();
  for (auto& t : threads) t.join();
  std::lock_guard lock(s.mu);
  s.run_done = true;
  s.stopped_cv.notify_all();
}

void HttpServer::stop() {
  Impl& s = *impl_;
  if (s.stopping.exchange(true)) return;
  asio::post(*s.ios[0], [&s] {
    boost::system::error_code ec;
    if (s.acceptor) s.acceptor->close(ec);
  });
  s.close_all();
  for (auto& g : s.guards) g.reset();
  if (!s.running) return;
  // Connections close at once; a handler still running (it sees its client
  // gone) gets kStopGrace before the I/O threads stop regardless.
  s.stop_watch = std::thread([&s] {
    std::unique_lock lock(s.mu);
    if (!s.stopped_cv.wait_for(lock, kStopGrace, [&s] { return s.run_done; }))
      for (auto& io : s.ios) io->stop();
  });
}

}  // namespace kvlm::http
