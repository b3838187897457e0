#include "kvstore/redis_link.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

namespace kvlm {
namespace {

// Waits for `events` on fd until `d`: the revents, 0 when the deadline
// passed, -1 on a poll error.
int wait_for(int fd, short events, const Deadline& d, const Clock& clock) {
  for (;;) {
    const double left = d.remaining_s(clock);
    if (left <= 0) return 0;
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::min(std::ceil(left * 1e3), 3.6e6)));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n > 0) return p.revents;
  }
}

// A non-blocking socket connected to `a` by `d`; -1 with errno on failure.
int connect_one(const addrinfo* a, const Deadline& d, const Clock& clock) {
  const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
  if (fd < 0) return -1;
  int err = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
  if (err == EINPROGRESS) {
    const int ev = wait_for(fd, POLLOUT, d, clock);
    socklen_t len = sizeof(err);
    if (ev <= 0) err = ETIMEDOUT;
    else if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
  }
  if (err != 0) {
    ::close(fd);
    errno = err;
    return -1;
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

}  // namespace

const char* redis_failure_name(RedisFailure f) {
  switch (f) {
    case RedisFailure::kNone: return "none";
    case RedisFailure::kBreakerOpen: return "circuit open";
    case RedisFailure::kDown: return "down";
    case RedisFailure::kTimeout: return "deadline passed";
    case RedisFailure::kReset: return "connection reset";
    case RedisFailure::kProtocol: return "protocol error";
    case RedisFailure::kOversize: return "reply past its limits";
    case RedisFailure::kHandshake: return "AUTH/SELECT refused";
    case RedisFailure::kRedirect: return "bad redirect";
  }
  return "?";
}

RedisLink::RedisLink(RedisEndpoint endpoint, RedisLinkOptions options, const Clock& clock)
    : endpoint_(std::move(endpoint)), options_(std::move(options)), clock_(clock) {}

RedisLink::~RedisLink() { disconnect(); }

void RedisLink::disconnect() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  parser_.reset();
}

bool RedisLink::reap_if_closed() {
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;  // quiet: still open
  disconnect();
  return true;
}

void RedisLink::fail(RedisFailure why, std::string what) {
  disconnect();
  Breaker& b = breaker();
  ++b.num_failures;
  const double backoff =
      std::min(options_.backoff_max_s, options_.backoff_min_s * std::pow(2.0, std::min(b.num_failures - 1, 30)));
  b.retry_at_s = clock_.now_s() + backoff;
  failure_ = why;
  last_error_ = endpoint_.to_string() + ": " + std::move(what);
}

bool RedisLink::connect(const Deadline& deadline) {
  const Deadline d = deadline.within(options_.connect_timeout_s, clock_);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  // A host name is resolved by the system resolver, which no deadline
  // bounds; tier URLs and cluster topologies name addresses.
  const int rc = ::getaddrinfo(endpoint_.host.c_str(), std::to_string(endpoint_.port).c_str(), &hints, &found);
  if (rc != 0) {
    fail(RedisFailure::kDown, std::string("cannot resolve: ") + ::gai_strerror(rc));
    return false;
  }
  int err = 0;
  for (const addrinfo* a = found; a != nullptr && fd_ < 0; a = a->ai_next) {
    fd_ = connect_one(a, d, clock_);
    if (fd_ < 0) err = errno;
  }
  ::freeaddrinfo(found);
  if (fd_ < 0) {
    fail(err == ETIMEDOUT ? RedisFailure::kTimeout : RedisFailure::kDown,
         std::string("connect: ") + std::strerror(err));
    return false;
  }
  parser_.reset();
  return handshake(deadline);
}

bool RedisLink::handshake(const Deadline& deadline) {
  std::vector<RedisCommand> hello;
  if (!options_.password.empty()) hello.push_back({"AUTH", options_.password});
  if (options_.db != 0) hello.push_back({"SELECT", std::to_string(options_.db)});
  if (hello.empty()) return true;
  std::vector<std::string> saved = std::move(pending_);
  pending_.clear();
  for (const auto& c : hello) pending_.push_back(encode_command(c));
  parser_.set_limits(ReplyLimits{.max_bulk_bytes = 4096, .max_elements = 0, .max_total_elements = 0});
  RedisFailure f = write_pending(0, deadline);
  for (size_t i = 0; i < hello.size() && f == RedisFailure::kNone; ++i) {
    RedisReply r;
    f = read_reply(&r, deadline);
    if (f == RedisFailure::kNone && r.is_error()) {
      pending_ = std::move(saved);
      fail(RedisFailure::kHandshake, hello[i][0] + ": " + r.str);
      return false;
    }
  }
  pending_ = std::move(saved);
  parser_.set_limits(call_.limits);
  if (f != RedisFailure::kNone) fail(f, std::string("handshake: ") + redis_failure_name(f));
  return f == RedisFailure::kNone;
}

RedisFailure RedisLink::write_pending(size_t first, const Deadline& deadline) {
  // Gathered writes: a pipeline of large SETs is not copied into one buffer.
  size_t i = first, offset = 0;
  while (i < pending_.size()) {
    iovec iov[64];
    int n = 0;
    for (size_t j = i; j < pending_.size() && n < 64; ++j, ++n) {
      const size_t skip = j == i ? offset : 0;
      iov[n] = iovec{pending_[j].data() + skip, pending_[j].size() - skip};
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(n);
    ssize_t put = ::sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (put < 0 && errno == EINTR) continue;
    if (put < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      const int ev = wait_for(fd_, POLLOUT, deadline, clock_);
      if (ev == 0) return RedisFailure::kTimeout;
      if (ev < 0 || (ev & (POLLERR | POLLHUP))) return RedisFailure::kReset;
      continue;
    }
    if (put < 0) return RedisFailure::kReset;
    for (auto left = static_cast<size_t>(put); left > 0 && i < pending_.size();) {
      const size_t here = std::min(left, pending_[i].size() - offset);
      left -= here;
      offset += here;
      if (offset == pending_[i].size()) {
        ++i;
        offset = 0;
      }
    }
  }
  return RedisFailure::kNone;
}

RedisFailure RedisLink::read_reply(RedisReply* out, const Deadline& deadline) {
  char buf[64 * 1024];
  for (;;) {
    switch (parser_.next(out)) {
      case RespParser::Result::kReply: return RedisFailure::kNone;
      case RespParser::Result::kProtocol: return RedisFailure::kProtocol;
      case RespParser::Result::kOversize: return RedisFailure::kOversize;
      case RespParser::Result::kNeedMore: break;
    }
    const int ev = wait_for(fd_, POLLIN, deadline, clock_);
    if (ev == 0) return RedisFailure::kTimeout;
    if (ev < 0) return RedisFailure::kReset;
    const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
    if (n > 0) parser_.feed(buf, static_cast<size_t>(n));
    else if (n == 0) return RedisFailure::kReset;  // the server closed the connection
    else if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) return RedisFailure::kReset;
  }
}

// Reconnects and resends the commands not yet answered, once per call and
// only over a connection that was open before the call. False when not
// allowed (nothing done, the socket still open) or when it failed (fail()
// called, the socket closed).
bool RedisLink::retry_after_reset() {
  if (!reused_ || retried_) return false;
  retried_ = true;
  reused_ = false;
  disconnect();
  if (!connect(deadline_)) return false;
  const RedisFailure f = write_pending(num_received_, deadline_);
  if (f != RedisFailure::kNone) fail(f, std::string("resend after a reset: ") + redis_failure_name(f));
  return f == RedisFailure::kNone;
}

bool RedisLink::send(std::span<const RedisCommand> commands, const RedisCall& call) {
  call_ = call;
  parser_.set_limits(call.limits);
  deadline_ = std::isinf(call.deadline.at_s) ? Deadline::in(options_.command_timeout_s, clock_) : call.deadline;
  pending_.clear();
  num_received_ = 0;
  retried_ = false;
  sent_ = false;
  last_used_s_ = clock_.now_s();
  const Breaker& b = breaker();
  if (b.num_failures > 0 && clock_.now_s() < b.retry_at_s) {
    failure_ = RedisFailure::kBreakerOpen;
    last_error_ = endpoint_.to_string() + ": circuit open after " + std::to_string(b.num_failures) + " failures";
    return false;
  }
  if (deadline_.passed(clock_)) {  // never tried: the server is not to blame
    failure_ = RedisFailure::kTimeout;
    last_error_ = endpoint_.to_string() + ": the deadline passed before the call";
    return false;
  }
  for (const auto& c : commands) pending_.push_back(encode_command(c));
  reused_ = fd_ >= 0;
  if (fd_ < 0 && !connect(deadline_)) return false;
  const RedisFailure f = write_pending(0, deadline_);
  sent_ = f == RedisFailure::kNone || (f == RedisFailure::kReset && retry_after_reset());
  // A retry that failed has already called fail() (and closed the socket).
  if (!sent_ && fd_ >= 0) fail(f, std::string("write: ") + redis_failure_name(f));
  return sent_;
}

std::vector<RedisReply> RedisLink::receive() {
  std::vector<RedisReply> replies;
  if (!sent_) return replies;
  sent_ = false;
  replies.reserve(pending_.size());
  while (num_received_ < pending_.size()) {
    RedisReply r;
    const RedisFailure f = read_reply(&r, deadline_);
    if (f == RedisFailure::kNone) {
      replies.push_back(std::move(r));
      ++num_received_;
      continue;
    }
    if (f == RedisFailure::kReset && retry_after_reset()) continue;
    if (fd_ >= 0) {  // else a failed retry has called fail()
      const std::string detail = f == RedisFailure::kProtocol || f == RedisFailure::kOversize ? ": " + parser_.error() : "";
      fail(f, std::string(redis_failure_name(f)) + detail);
    }
    break;
  }
  if (num_received_ == pending_.size()) {
    breaker() = Breaker{};
    failure_ = RedisFailure::kNone;
    last_error_.clear();
  }
  pending_.clear();
  num_received_ = 0;
  return replies;
}

std::vector<RedisReply> RedisLink::pipeline(std::span<const RedisCommand> commands, const RedisCall& call) {
  if (commands.empty()) return {};
  if (!send(commands, call)) return {};
  return receive();
}

}  // namespace kvlm
