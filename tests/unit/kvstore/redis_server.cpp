#include "redis_server.h"

#include <chrono>
#include <csignal>
#include <filesystem>
#include <random>
#include <thread>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include "support/test_support.h"

namespace kvlm::test {
namespace {

bool port_free(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  ::close(fd);
  return ok;
}

bool answers_ping(int port) {
  timeval tv{0, 200000};
  redisContext* c = redisConnectWithTimeout("127.0.0.1", port, tv);
  bool ok = false;
  if (c != nullptr && c->err == 0) {
    auto* r = static_cast<redisReply*>(redisCommand(c, "PING"));
    ok = r != nullptr;  // PONG, or NOAUTH from a server with a password: it is up
    if (r != nullptr) freeReplyObject(r);
  }
  if (c != nullptr) redisFree(c);
  return ok;
}

}  // namespace

int free_port_pair() {
  std::mt19937 rng(static_cast<uint32_t>(::getpid()) ^
                   static_cast<uint32_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  for (int i = 0; i < 1000; ++i) {
    int p = 20000 + static_cast<int>(rng() % 25000);
    if (port_free(p) && port_free(p + 10000)) return p;
  }
  ADD_FAILURE() << "no free loopback port";
  return 0;
}

RedisServer::RedisServer(std::vector<std::string> extra_args, int port)
    : extra_args_(std::move(extra_args)), port_(port) {
  if (!have_program("redis-server") || !have_program("redis-cli")) {
    ADD_FAILURE() << "redis-server / redis-cli are not installed: the Redis tier tests need them "
                     "(apt-get install redis-server redis-tools; scripts/setup.sh installs them)";
    return;
  }
  static int counter = 0;
  dir_ = temp_dir() + "/redis-" + std::to_string(counter++);
  std::filesystem::create_directories(dir_);
  // A free port can be taken by a parallel test between the check and
  // redis-server's bind: then it exits at start and a chosen port is tried again.
  const bool choose_port = port_ == 0;
  for (int attempt = 0; attempt < 5; ++attempt) {
    if (choose_port) port_ = free_port_pair();
    if (start(/*quiet_if_exits=*/choose_port && attempt < 4)) return;
    if (!choose_port) return;
  }
}

RedisServer::~RedisServer() { kill(); }

bool RedisServer::start(bool quiet_if_exits) {
  std::vector<std::string> argv = {"redis-server", "--port", std::to_string(port_), "--bind", "127.0.0.1",
                                   "--save", "", "--appendonly", "no", "--dir", dir_, "--daemonize", "no",
                                   "--logfile", dir_ + "/redis.log"};
  argv.insert(argv.end(), extra_args_.begin(), extra_args_.end());
  pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    int null_fd = ::open("/dev/null", O_RDWR);
    ::dup2(null_fd, 1);
    ::dup2(null_fd, 2);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  pid_ = pid;
  for (int i = 0; i < 200; ++i) {  // up to 10 s
    if (answers_ping(port_)) return true;
    int status;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      if (!quiet_if_exits)
        ADD_FAILURE() << "redis-server exited at start on port " << port_ << "; see " << dir_ << "/redis.log";
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ADD_FAILURE() << "redis-server on port " << port_ << " did not answer PING within 10 s";
  return false;
}

void RedisServer::kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);  // also ends a frozen server
  int status;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
}

void RedisServer::freeze() {
  if (pid_ > 0) ::kill(pid_, SIGSTOP);
}

void RedisServer::thaw() {
  if (pid_ > 0) ::kill(pid_, SIGCONT);
}

void RedisServer::restart() {
  kill();
  start(/*quiet_if_exits=*/false);
}

std::string RedisServer::cli(const std::vector<std::string>& args) const {
  std::vector<std::string> argv = {"redis-cli", "-p", std::to_string(port_)};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_program(argv).out;
}

RedisCluster::RedisCluster() {
  std::vector<std::string> create = {"redis-cli", "--cluster", "create"};
  for (int i = 0; i < 3; ++i) {
    // Each node has its own directory, so one config file name serves all.
    nodes_.push_back(std::make_unique<RedisServer>(std::vector<std::string>{
        "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "3000"}));
    if (!nodes_.back()->running()) return;
    create.push_back(nodes_.back()->endpoint());
  }
  create.insert(create.end(), {"--cluster-replicas", "0", "--cluster-yes"});
  CommandResult r = run_program(create);
  if (r.exit_code != 0) {
    ADD_FAILURE() << "redis-cli --cluster create failed: " << r.out << r.err;
    return;
  }
  for (int i = 0; i < 200; ++i) {  // up to 20 s for every node to agree
    bool ok = true;
    for (auto& n : nodes_) ok = ok && n->cli({"CLUSTER", "INFO"}).find("cluster_state:ok") != std::string::npos;
    if (ok) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ADD_FAILURE() << "the cluster did not reach cluster_state:ok";
}

std::string RedisCluster::url() const {
  std::string u = "redis+cluster://";
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (i > 0) u += ",";
    u += nodes_[i]->endpoint();
  }
  return u;
}

}  // namespace kvlm::test
