// A scripted, misbehaving Redis for the tier tests: a small RESP server on
// loopback ports, in a thread of the test process, that answers like a real
// one (GET, SET with NX and EX, EXISTS, CLUSTER SLOTS owning every slot, AUTH,
// SELECT, PING) except in the one way its mode says. The mode can change
// while clients are connected.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kvlm::test {

class FakeRedis {
 public:
  enum class Mode {
    kNormal,
    kByteAtATime,     // every reply written one byte at a time, `delay_s` apart
    kSlowGet,         // GET replies `delay_s` late (other commands at once)
    kMovedLoop,       // GET and SET: -MOVED to this same server, forever
    kSlowMoved,       // the same, each `delay_s` late
    kMovedElsewhere,  // GET and SET: -MOVED to the next of the extra ports (not in CLUSTER SLOTS)
    kHugeArray,       // GET: `*2147483647`, then nothing
    kHugeBulk,        // GET: `$1500000000`, then a trickle of bytes
    kErrors,          // every command but PING and CLUSTER SLOTS: -ERR
    kResetOnReuse,    // a connection's second command closes it unanswered
    kManyNodes,       // CLUSTER SLOTS spreads the slots over the main and extra ports
  };

  // Listens on a free loopback port, plus `num_extra_ports` more that count
  // the connections they accept and answer as kNormal.
  explicit FakeRedis(Mode mode, double delay_s = 0, int num_extra_ports = 0);
  ~FakeRedis();
  FakeRedis(const FakeRedis&) = delete;
  FakeRedis& operator=(const FakeRedis&) = delete;

  void set_mode(Mode mode, double delay_s = 0);
  int port() const { return ports_[0]; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port()); }
  std::string cluster_url() const { return "redis+cluster://127.0.0.1:" + std::to_string(port()); }
  // Connections accepted on the main port and on the extra ports, and open now.
  int num_accepted() const { return num_accepted_[0].load(); }
  int num_accepted_extra() const { return num_accepted_[1].load(); }
  int num_open() const { return num_open_.load(); }
  // GET commands received on the main port.
  int num_gets() const { return num_gets_.load(); }
  // Closes every client connection (the server side of a restart).
  void close_clients() { close_clients_.store(true); }

 private:
  struct Conn;
  void run();
  void serve(Conn& c, double now);
  void answer(Conn& c, const std::vector<std::string>& argv, double now);
  std::string cluster_slots() const;
  std::string moved_to(int port, const std::string& key) const;

  std::vector<int> listeners_, ports_;
  std::atomic<Mode> mode_;
  std::atomic<double> delay_s_;
  std::atomic<int> num_accepted_[2] = {0, 0};
  std::atomic<int> num_open_{0}, num_gets_{0};
  std::atomic<bool> close_clients_{false}, stop_{false};
  size_t next_extra_ = 0;
  std::map<std::string, std::string> data_;  // the keyspace (run() thread only)
  int wake_[2] = {-1, -1};                     // a pipe that ends run()'s poll
  std::thread thread_;
};

}  // namespace kvlm::test
