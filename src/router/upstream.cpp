#include "router/upstream.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

#include <fmt/format.h>

#include "common/error.h"

namespace kvlm::router {
namespace {

using Ms = std::chrono::milliseconds;

constexpr size_t kMaxHeadBytes = 64 << 10;
constexpr size_t kMaxChunkLine = 1024;
constexpr Ms kFrameTimeout{10000};

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// Waits for `events` on fd; false on timeout.
bool wait_fd(int fd, short events, Ms timeout) {
  pollfd p{fd, events, 0};
  for (;;) {
    const int r = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(timeout.count(), 0)));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return true;  // let the read or write report it
  }
}

int connect_one(const addrinfo& ai, Ms timeout) {
  const int fd = ::socket(ai.ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (::connect(fd, ai.ai_addr, ai.ai_addrlen) != 0 && errno != EINPROGRESS) {
    ::close(fd);
    return -1;
  }
  int err = 0;
  socklen_t len = sizeof(err);
  if (!wait_fd(fd, POLLOUT, timeout) || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
    ::close(fd);
    errno = err != 0 ? err : ETIMEDOUT;
    return -1;
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

int connect_to(const WorkerAddress& a, Ms timeout) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(a.port);
  if (const int rc = ::getaddrinfo(a.host.c_str(), port.c_str(), &hints, &found); rc != 0)
    throw_error(ErrorCode::kUnavailable, "cannot resolve {}: {}", a.host, ::gai_strerror(rc));
  int fd = -1;
  int err = 0;
  for (addrinfo* ai = found; ai && fd < 0; ai = ai->ai_next) {
    fd = connect_one(*ai, timeout);
    if (fd < 0) err = errno;
  }
  ::freeaddrinfo(found);
  if (fd < 0) throw_error(ErrorCode::kUnavailable, "cannot connect to {}: {}", a.url, std::strerror(err));
  return fd;
}

// An idle connection the worker has closed (or sent something on) is readable.
bool still_idle(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 0;
}

}  // namespace

WorkerAddress parse_worker_url(std::string_view url) {
  std::string_view rest = url;
  if (rest.rfind("http://", 0) != 0) {
    if (rest.rfind("https://", 0) == 0)
      throw_error(ErrorCode::kInvalidArgument, "worker URL '{}': https is not supported between router and workers", url);
    throw_error(ErrorCode::kInvalidArgument, "worker URL '{}' must look like http://HOST:PORT", url);
  }
  rest.remove_prefix(7);
  while (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  const size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || rest.find('/') != std::string_view::npos)
    throw_error(ErrorCode::kInvalidArgument, "worker URL '{}' must look like http://HOST:PORT", url);
  WorkerAddress a;
  a.host = std::string(rest.substr(0, colon));
  if (a.host.size() > 2 && a.host.front() == '[' && a.host.back() == ']') a.host = a.host.substr(1, a.host.size() - 2);
  const std::string_view port = rest.substr(colon + 1);
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), a.port);
  if (ec != std::errc() || end != port.data() + port.size() || a.port < 1 || a.port > 65535)
    throw_error(ErrorCode::kInvalidArgument, "worker URL '{}': '{}' is not a port", url, port);
  a.url = fmt::format("http://{}", rest);
  return a;
}

// ---- UpstreamLink ------------------------------------------------------------

UpstreamLink::UpstreamLink(WorkerAddress address, size_t max_idle) : address_(std::move(address)), max_idle_(max_idle) {}

UpstreamLink::~UpstreamLink() {
  for (int fd : idle_) ::close(fd);
}

int UpstreamLink::acquire(Ms timeout, bool* reused) {
  {
    std::lock_guard lock(mu_);
    while (!idle_.empty()) {
      const int fd = idle_.back();
      idle_.pop_back();
      if (still_idle(fd)) {
        *reused = true;
        return fd;
      }
      ::close(fd);
    }
  }
  *reused = false;
  return connect_to(address_, timeout);
}

void UpstreamLink::release(int fd) {
  std::lock_guard lock(mu_);
  if (idle_.size() < max_idle_) {
    idle_.push_back(fd);
  } else {
    ::close(fd);
  }
}

void UpstreamLink::enter(UpstreamExchange* x) {
  std::lock_guard lock(mu_);
  in_flight_.insert(x);
}

void UpstreamLink::leave(UpstreamExchange* x) {
  std::lock_guard lock(mu_);
  in_flight_.erase(x);
}

void UpstreamLink::abort_all() {
  std::lock_guard lock(mu_);
  for (UpstreamExchange* x : in_flight_) x->abort();
  for (int fd : idle_) ::close(fd);
  idle_.clear();
}

// ---- UpstreamExchange --------------------------------------------------------

UpstreamExchange::UpstreamExchange(UpstreamLink& link, const UpstreamRequest& request, const UpstreamTimeouts& t)
    : link_(link) {
  link_.enter(this);
  try {
    for (int attempt = 0;; ++attempt) {
      bool reused = false;
      const int fd = link_.acquire(t.connect, &reused);
      {
        std::lock_guard lock(fd_mu_);
        fd_ = fd;
        if (aborted_) ::shutdown(fd_, SHUT_RDWR);
      }
      try {
        send(request, t.send);
        sent_at_ = std::chrono::steady_clock::now();
        read_head(t.head);
        return;
      } catch (const Error&) {
        // A kept-alive connection the worker closed just now: nothing of the
        // request was handled, so one fresh connection may try again.
        const bool retry = reused && attempt == 0 && in_.empty() && status_ == 0 && !aborted_;
        std::lock_guard lock(fd_mu_);
        ::close(fd_);
        fd_ = -1;
        if (!retry) throw;
      }
    }
  } catch (...) {
    link_.leave(this);
    throw;
  }
}

UpstreamExchange::~UpstreamExchange() {
  // Out of the link's in-flight set first: abort_all() (which holds the
  // link's lock, then takes fd_mu_) can no longer reach this exchange, so
  // the socket is ours without fd_mu_ — and the link's lock is never taken
  // under fd_mu_ (that order would invert abort_all's).
  link_.leave(this);
  if (fd_ < 0) return;
  if (done_ && keep_alive_ && !aborted_ && in_.empty()) {
    link_.release(fd_);
  } else {
    ::close(fd_);
  }
}

void UpstreamExchange::abort() {
  std::lock_guard lock(fd_mu_);
  aborted_ = true;
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

void UpstreamExchange::fail(const std::string& what) const {
  throw_error(ErrorCode::kUnavailable, "worker {}: {}", link_.address().url,
              aborted_ ? std::string("the request was aborted (the worker stopped answering)") : what);
}

void UpstreamExchange::send(const UpstreamRequest& r, Ms timeout) {
  std::string out = fmt::format("{} {} HTTP/1.1\r\nHost: {}:{}\r\n", r.method, r.target, link_.address().host,
                                link_.address().port);
  for (const auto& [k, v] : r.headers) out += k + ": " + v + "\r\n";
  if (!r.body.empty() || r.method == "POST") out += fmt::format("Content-Length: {}\r\n", r.body.size());
  out += "\r\n";
  out += r.body;
  size_t sent = 0;
  while (sent < out.size()) {
    const ssize_t n = ::send(fd_, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_fd(fd_, POLLOUT, timeout)) fail("timed out sending the request");
      continue;
    }
    fail(fmt::format("sending the request failed: {}", std::strerror(errno)));
  }
}

UpstreamExchange::Read UpstreamExchange::fill(Ms timeout) {
  char buf[16384];
  for (;;) {
    const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
    if (n > 0) {
      in_.append(buf, static_cast<size_t>(n));
      return Read::kData;
    }
    if (n == 0) {
      if (aborted_) fail("aborted");
      return Read::kEnd;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_fd(fd_, POLLIN, timeout)) return Read::kIdle;
      continue;
    }
    fail(fmt::format("reading failed: {}", std::strerror(errno)));
  }
}

void UpstreamExchange::need(Ms timeout) {
  // The rest of a frame that has begun comes at once from a sane server:
  // a short wait for the next event must not fail a frame in two packets.
  timeout = std::max(timeout, kFrameTimeout);
  switch (fill(timeout)) {
    case Read::kData: return;
    case Read::kEnd: fail("the answer was cut off");
    case Read::kIdle: fail(fmt::format("no answer for {} ms", timeout.count()));
  }
}

void UpstreamExchange::read_head(Ms timeout) {
  size_t end;
  while ((end = in_.find("\r\n\r\n")) == std::string::npos) {
    if (in_.size() > kMaxHeadBytes) fail("response headers too large");
    const Read r = fill(timeout);
    if (r == Read::kEnd) fail(in_.empty() ? "the connection closed before an answer" : "the answer was cut off");
    if (r == Read::kIdle) fail(fmt::format("no answer within {} ms", timeout.count()));
  }
  const std::string head = in_.substr(0, end);
  in_.erase(0, end + 4);
  size_t line_end = head.find("\r\n");
  const std::string status_line = head.substr(0, line_end);
  if (status_line.rfind("HTTP/1.", 0) != 0 || status_line.size() < 12) fail("not an HTTP answer: " + status_line);
  status_ = std::atoi(status_line.c_str() + 9);
  if (status_line.rfind("HTTP/1.0", 0) == 0) keep_alive_ = false;
  while (line_end != std::string::npos) {
    const size_t start = line_end + 2;
    line_end = head.find("\r\n", start);
    const std::string line = head.substr(start, line_end == std::string::npos ? std::string::npos : line_end - start);
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(" \t"));
    headers_.emplace_back(lower(line.substr(0, colon)), value);
  }
  if (lower(header("connection")) == "close") keep_alive_ = false;
  if (lower(header("transfer-encoding")).find("chunked") != std::string::npos) {
    body_ = Body::kChunked;
  } else if (const std::string len = header("content-length"); !len.empty()) {
    body_ = Body::kLength;
    remaining_ = std::strtoll(len.c_str(), nullptr, 10);
    if (remaining_ < 0) fail("bad Content-Length");
  } else if (status_ == 204 || status_ == 304 || status_ / 100 == 1) {
    remaining_ = 0;
  } else {
    body_ = Body::kUntilClose;
    keep_alive_ = false;
  }
}

std::string UpstreamExchange::header(std::string_view name) const {
  const std::string want = lower(name);
  for (const auto& [k, v] : headers_)
    if (k == want) return v;
  return "";
}

UpstreamExchange::Read UpstreamExchange::read_body(std::string& out, Ms wait) {
  if (done_) return Read::kEnd;
  switch (body_) {
    case Body::kLength: {
      if (remaining_ == 0) {
        done_ = true;
        return Read::kEnd;
      }
      if (in_.empty()) {
        const Read r = fill(wait);
        if (r == Read::kEnd) fail("the answer was cut off");
        if (r == Read::kIdle) return r;
      }
      const size_t n = std::min<size_t>(in_.size(), static_cast<size_t>(remaining_));
      out.append(in_, 0, n);
      in_.erase(0, n);
      remaining_ -= static_cast<int64_t>(n);
      return Read::kData;
    }
    case Body::kUntilClose:
      if (in_.empty()) {
        const Read r = fill(wait);
        if (r == Read::kEnd) done_ = true;
        if (r != Read::kData) return r;
      }
      out += in_;
      in_.clear();
      return Read::kData;
    case Body::kChunked:
      return take_chunked(out, wait);
  }
  return Read::kEnd;
}

UpstreamExchange::Read UpstreamExchange::take_chunked(std::string& out, Ms wait) {
  // Waits past the first only while a chunk's framing is half read.
  for (;;) {
    if (remaining_ > 0) {
      if (in_.empty()) {
        const Read r = fill(wait);
        if (r == Read::kEnd) fail("the answer was cut off");
        if (r == Read::kIdle) return r;
      }
      const size_t n = std::min<size_t>(in_.size(), static_cast<size_t>(remaining_));
      out.append(in_, 0, n);
      in_.erase(0, n);
      remaining_ -= static_cast<int64_t>(n);
      if (remaining_ == 0) chunk_needs_crlf_ = true;
      return Read::kData;
    }
    if (in_.empty()) {
      const Read r = fill(wait);
      if (r == Read::kEnd) fail("the answer was cut off");
      if (r == Read::kIdle) return r;
    }
    if (in_trailers_) return take_trailers(wait);
    if (chunk_needs_crlf_) {
      while (in_.size() < 2)
        if (!more(wait)) return Read::kIdle;
      if (in_.compare(0, 2, "\r\n") != 0) fail("bad chunked encoding");
      in_.erase(0, 2);
      chunk_needs_crlf_ = false;
      continue;
    }
    size_t eol;
    while ((eol = in_.find("\r\n")) == std::string::npos) {
      if (in_.size() > kMaxChunkLine) fail("bad chunked encoding");
      if (!more(wait)) return Read::kIdle;
    }
    uint64_t size = 0;
    const auto [end, ec] = std::from_chars(in_.data(), in_.data() + eol, size, 16);
    if (ec != std::errc() || (end != in_.data() + eol && *end != ';')) fail("bad chunk size");
    in_.erase(0, eol + 2);
    if (size == 0) {
      in_trailers_ = true;
      return take_trailers(wait);
    }
    remaining_ = static_cast<int64_t>(size);
  }
}

// The trailers after the last chunk (none from kvlm), up to the empty line.
UpstreamExchange::Read UpstreamExchange::take_trailers(Ms wait) {
  for (;;) {
    size_t eol;
    while ((eol = in_.find("\r\n")) == std::string::npos) {
      if (in_.size() > kMaxHeadBytes) fail("bad chunked trailer");
      if (!more(wait)) return Read::kIdle;
    }
    in_.erase(0, eol + 2);
    if (eol == 0) break;
  }
  in_trailers_ = false;
  done_ = true;
  return Read::kEnd;
}

bool UpstreamExchange::more(Ms wait) {
  if (wait.count() > 0) {
    need(wait);
    return true;
  }
  // Without a wait the frame's rest is awaited by the caller's next read.
  const Read r = fill(Ms(0));
  if (r == Read::kEnd) fail("the answer was cut off");
  return r == Read::kData;
}

std::string UpstreamExchange::read_all(Ms idle_timeout) {
  std::string body;
  for (;;) {
    const Read r = read_body(body, idle_timeout);
    if (r == Read::kEnd) return body;
    if (r == Read::kIdle) fail(fmt::format("no answer for {} ms", idle_timeout.count()));
  }
}

}  // namespace kvlm::router
