// Real Redis servers for the tier tests, on free loopback ports, each in its
// own temporary directory. RAII: the destructor kills the server (and the
// child dies with the test process if that crashes: PR_SET_PDEATHSIG).
// A missing redis-server binary fails the test, naming the package.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace kvlm::test {

class RedisServer {
 public:
  // Starts `redis-server --port P --save '' --appendonly no ... extra_args`
  // and waits until it answers PING. Fails the test if it does not. port 0:
  // a free one (retried if a parallel test takes it first).
  explicit RedisServer(std::vector<std::string> extra_args = {}, int port = 0);
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const { return port_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }
  bool running() const { return pid_ > 0; }
  // SIGKILL and reap (a crash, as far as clients can tell).
  void kill();
  // Starts again on the same port (after kill()). Fails the test on failure.
  void restart();
  // SIGSTOP / SIGCONT: a server that accepts connections but never answers.
  void freeze();
  void thaw();
  // redis-cli -p PORT args...; stdout.
  std::string cli(const std::vector<std::string>& args) const;

 private:
  // Starts redis-server on port_; false (a test failure unless
  // quiet_if_exits and it exited, e.g. the port was taken) if it does not answer.
  bool start(bool quiet_if_exits);
  std::vector<std::string> extra_args_;
  int port_ = 0;
  int pid_ = -1;
  std::string dir_;
};

// A 3-master Redis Cluster on loopback (no replicas), created with
// `redis-cli --cluster create ... --cluster-yes`; ready (cluster_state:ok on
// every node) when the constructor returns.
class RedisCluster {
 public:
  RedisCluster();
  std::string url() const;  // redis+cluster://127.0.0.1:p1,...
  RedisServer& node(int i) { return *nodes_[static_cast<size_t>(i)]; }
  int num_nodes() const { return static_cast<int>(nodes_.size()); }

 private:
  std::vector<std::unique_ptr<RedisServer>> nodes_;
};

// A free loopback TCP port whose cluster-bus twin (port + 10000) is free too.
int free_port_pair();

}  // namespace kvlm::test
