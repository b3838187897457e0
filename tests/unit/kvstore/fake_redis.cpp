#include "fake_redis.h"

#include <algorithm>
#include <chrono>
#include <deque>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "kvstore/redis_cluster.h"
#include "kvstore/resp.h"

namespace kvlm::test {
namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// A listening socket on a free loopback port; its port through *port.
int listen_loopback(int* port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(fd, 64) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ADD_FAILURE() << "the fake Redis cannot listen on loopback";
    ::close(fd);
    return -1;
  }
  *port = ntohs(a.sin_port);
  return fd;
}

std::string bulk(const std::string& s) { return fmt::format("${}\r\n{}\r\n", s.size(), s); }

}  // namespace

struct FakeRedis::Conn {
  struct Out {
    double due_s;
    std::string bytes;
    bool trickle;  // one byte per write, delay apart
  };
  int fd = -1;
  bool extra = false;         // accepted on an extra port: always kNormal
  RespParser parser;
  std::deque<Out> out;
  int num_reads = 0;          // reads that brought commands
  bool closed = false;
};

FakeRedis::FakeRedis(Mode mode, double delay_s, int num_extra_ports) : mode_(mode), delay_s_(delay_s) {
  for (int i = 0; i <= num_extra_ports; ++i) {
    int port = 0;
    listeners_.push_back(listen_loopback(&port));
    ports_.push_back(port);
  }
  if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) ADD_FAILURE() << "pipe2";
  thread_ = std::thread([this] { run(); });
}

FakeRedis::~FakeRedis() {
  stop_.store(true);
  (void)!::write(wake_[1], "x", 1);
  thread_.join();
  for (int fd : listeners_) ::close(fd);
  ::close(wake_[0]);
  ::close(wake_[1]);
}

void FakeRedis::set_mode(Mode mode, double delay_s) {
  delay_s_.store(delay_s);
  mode_.store(mode);
}

std::string FakeRedis::cluster_slots() const {
  const bool many = mode_.load() == Mode::kManyNodes;
  const size_t n = many ? ports_.size() : 1;
  std::string out = fmt::format("*{}\r\n", n);
  for (size_t i = 0; i < n; ++i) {
    const size_t first = i * kRedisNumSlots / n, last = (i + 1) * kRedisNumSlots / n - 1;
    out += fmt::format("*3\r\n:{}\r\n:{}\r\n*3\r\n{}:{}\r\n{}", first, last, bulk("127.0.0.1"), ports_[i],
                       bulk(fmt::format("node{:036}", i)));
  }
  return out;
}

std::string FakeRedis::moved_to(int port, const std::string& key) const {
  return fmt::format("-MOVED {} 127.0.0.1:{}\r\n", redis_key_slot(key), port);
}

void FakeRedis::answer(Conn& c, const std::vector<std::string>& argv, double now) {
  std::string cmd = argv.empty() ? "" : argv[0];
  std::transform(cmd.begin(), cmd.end(), cmd.begin(), ::toupper);
  const Mode mode = c.extra ? Mode::kNormal : mode_.load();
  const double delay = delay_s_.load();
  const bool keyed = (cmd == "GET" || cmd == "SET" || cmd == "EXISTS") && argv.size() > 1;
  Conn::Out o{now, "", mode == Mode::kByteAtATime};
  if (cmd == "GET" && !c.extra) num_gets_.fetch_add(1);
  if (cmd == "PING") {
    o.bytes = "+PONG\r\n";
  } else if (cmd == "CLUSTER") {
    o.bytes = cluster_slots();
  } else if (mode == Mode::kErrors) {
    o.bytes = "-ERR the fake Redis refuses everything\r\n";
  } else if (keyed && (mode == Mode::kMovedLoop || mode == Mode::kSlowMoved)) {
    o.bytes = moved_to(port(), argv[1]);
    if (mode == Mode::kSlowMoved) o.due_s = now + delay;
  } else if (keyed && mode == Mode::kMovedElsewhere && ports_.size() > 1) {
    o.bytes = moved_to(ports_[1 + next_extra_++ % (ports_.size() - 1)], argv[1]);
  } else if (cmd == "GET" && mode == Mode::kHugeArray) {
    o.bytes = "*2147483647\r\n";
  } else if (cmd == "GET" && mode == Mode::kHugeBulk) {
    o.bytes = "$1500000000\r\n" + std::string(4096, 'x');
  } else if (cmd == "GET" && argv.size() > 1) {
    auto it = data_.find(argv[1]);
    o.bytes = it == data_.end() ? "$-1\r\n" : bulk(it->second);
    if (mode == Mode::kSlowGet) o.due_s = now + delay;
  } else if (cmd == "SET" && argv.size() > 2) {
    const bool nx = std::find(argv.begin() + 3, argv.end(), "NX") != argv.end();
    if (nx && data_.count(argv[1])) {
      o.bytes = "$-1\r\n";
    } else {
      data_[argv[1]] = argv[2];
      o.bytes = "+OK\r\n";
    }
  } else if (cmd == "EXISTS" && argv.size() > 1) {
    o.bytes = data_.count(argv[1]) ? ":1\r\n" : ":0\r\n";
  } else {
    o.bytes = "+OK\r\n";  // AUTH, SELECT, ASKING, ...
  }
  // Replies leave in order: none before the one ahead of it.
  if (!c.out.empty()) o.due_s = std::max(o.due_s, c.out.back().due_s);
  c.out.push_back(std::move(o));
}

void FakeRedis::serve(Conn& c, double now) {
  while (!c.out.empty() && c.out.front().due_s <= now) {
    Conn::Out& o = c.out.front();
    const size_t n = o.trickle ? 1 : o.bytes.size();
    const ssize_t put = ::send(c.fd, o.bytes.data(), n, MSG_NOSIGNAL);
    if (put < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (put <= 0) {
      c.closed = true;
      return;
    }
    o.bytes.erase(0, static_cast<size_t>(put));
    if (o.bytes.empty()) {
      c.out.pop_front();
    } else if (o.trickle) {
      o.due_s = now + delay_s_.load();
      return;
    }
  }
}

void FakeRedis::run() {
  std::vector<std::unique_ptr<Conn>> conns;
  while (!stop_.load()) {
    if (close_clients_.exchange(false)) {
      for (auto& c : conns) c->closed = true;
    }
    std::erase_if(conns, [&](const auto& c) {
      if (c->closed) {
        ::close(c->fd);
        num_open_.fetch_sub(1);
      }
      return c->closed;
    });
    double now = now_s(), next_due = now + 0.05;
    std::vector<pollfd> fds = {{wake_[0], POLLIN, 0}};
    for (int l : listeners_) fds.push_back({l, POLLIN, 0});
    for (auto& c : conns) {
      const bool due = !c->out.empty() && c->out.front().due_s <= now;
      if (!c->out.empty()) next_due = std::min(next_due, c->out.front().due_s);
      fds.push_back({c->fd, static_cast<short>(POLLIN | (due ? POLLOUT : 0)), 0});
    }
    ::poll(fds.data(), fds.size(), std::max(0, static_cast<int>((next_due - now) * 1e3)));
    now = now_s();
    for (size_t i = 0; i < listeners_.size(); ++i) {
      if (!(fds[1 + i].revents & POLLIN)) continue;
      for (int fd; (fd = ::accept4(listeners_[i], nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0;) {
        const int one = 1;  // as Redis: replies are not held back for an ACK
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        auto c = std::make_unique<Conn>();
        c->fd = fd;
        c->extra = i > 0;
        num_accepted_[i > 0 ? 1 : 0].fetch_add(1);
        num_open_.fetch_add(1);
        conns.push_back(std::move(c));
      }
    }
    const size_t first_conn = 1 + listeners_.size();
    for (size_t k = 0; k + first_conn < fds.size() && k < conns.size(); ++k) {
      Conn& c = *conns[k];
      if (fds[first_conn + k].revents & (POLLIN | POLLHUP | POLLERR)) {
        char buf[65536];
        const ssize_t n = ::recv(c.fd, buf, sizeof(buf), 0);
        if (n <= 0) {
          c.closed = n == 0 || (errno != EAGAIN && errno != EINTR);
          continue;
        }
        if (!c.extra && mode_.load() == Mode::kResetOnReuse && c.num_reads > 0) {
          c.closed = true;  // a restarted server: the old connection ends unanswered
          continue;
        }
        ++c.num_reads;
        c.parser.feed(buf, static_cast<size_t>(n));
        RedisReply r;
        while (c.parser.next(&r) == RespParser::Result::kReply) {
          std::vector<std::string> argv;
          for (auto& e : r.elements) argv.push_back(std::move(e.str));
          answer(c, argv, now);
        }
      }
      serve(c, now);
    }
  }
  for (auto& c : conns) ::close(c->fd);
}

}  // namespace kvlm::test
