// One connection to one Redis server, with the failure handling a cache tier
// needs (docs/kv-tiers.md "Deadlines and bounds"):
//
//  - Deadlines, not per-read timeouts: every call has one point in time for
//    all of it (connect, AUTH/SELECT, writing, every reply), so a server that
//    answers a byte at a time costs no more than one that never answers.
//    Calls without one get command_timeout_s from now.
//  - Bounded replies: RespParser refuses a length past the call's
//    ReplyLimits when it reads the header, before allocating anything.
//  - Two circuit breakers, one for reads (lookups) and one for writes, each
//    with exponential backoff: a server that stalls only GETs opens the read
//    breaker while writes go on, and a successful SET does not close it.
//    While a breaker is open its calls return at once, with no network.
//  - One reconnect and retry when a connection that was open before the call
//    turns out reset or closed by the server (a restarted Redis), for the
//    commands not yet answered.
//  - A call that fails drops the connection: its stream is out of step.
//
// Not thread-safe: one owner (the I/O thread, a router, or a test) uses a link.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/clock.h"
#include "kvstore/deadline.h"
#include "kvstore/resp.h"

namespace kvlm {

struct RedisEndpoint {
  std::string host;
  int port = 6379;
  std::string to_string() const { return host + ":" + std::to_string(port); }
  auto operator<=>(const RedisEndpoint&) const = default;
};

struct RedisLinkOptions {
  double connect_timeout_s = 0.25;
  double command_timeout_s = 0.5;  // a call's deadline when it brings none
  std::string password;            // AUTH after connecting when not empty
  int db = 0;                      // SELECT after connecting when not 0
  double backoff_min_s = 0.1;      // breaker open time after the first failure
  double backoff_max_s = 5.0;      // doubling up to this
  size_t max_cluster_connections = 64;  // open sockets of one Redis Cluster router
};

// What a call is for and how long and large its answer may be.
struct RedisCall {
  enum class Kind { kRead, kWrite };
  Kind kind = Kind::kWrite;
  Deadline deadline;     // none: command_timeout_s from the call
  ReplyLimits limits;
};

// Why replies are missing.
enum class RedisFailure {
  kNone,
  kBreakerOpen,
  kDown,
  kTimeout,
  kReset,
  kProtocol,
  kOversize,
  kHandshake,
  kRedirect,  // cluster: a redirect loop, or to a node outside the topology
};
const char* redis_failure_name(RedisFailure f);

class RedisLink {
 public:
  RedisLink(RedisEndpoint endpoint, RedisLinkOptions options, const Clock& clock = steady_clock());
  ~RedisLink();
  RedisLink(const RedisLink&) = delete;
  RedisLink& operator=(const RedisLink&) = delete;

  // Sends every command and reads the replies (one round trip). Returns the
  // replies in order; fewer than commands when the call failed part-way
  // (failure() says why). A Redis error reply (OOM, MOVED, WRONGTYPE) is a
  // reply, not a failure.
  std::vector<RedisReply> pipeline(std::span<const RedisCommand> commands, const RedisCall& call = {});
  // pipeline() in two halves, so a caller can send to several servers before
  // reading any reply (one round trip for all of them).
  bool send(std::span<const RedisCommand> commands, const RedisCall& call = {});
  std::vector<RedisReply> receive();

  // The last call got every reply.
  bool up() const { return failure_ == RedisFailure::kNone; }
  bool connected() const { return fd_ >= 0; }
  RedisFailure failure() const { return failure_; }
  const RedisEndpoint& endpoint() const { return endpoint_; }
  // Why the last call failed ("" after a success).
  const std::string& last_error() const { return last_error_; }
  // Closes the connection if, idle, the server closed its end or wrote
  // unasked (a socket in CLOSE_WAIT); true if it did. No network wait.
  bool reap_if_closed();
  // Closes the connection (no breaker change): the cluster router's cap.
  void disconnect();
  double last_used_s() const { return last_used_s_; }

 private:
  struct Breaker {
    int num_failures = 0;
    double retry_at_s = 0;
  };
  bool connect(const Deadline& deadline);
  bool handshake(const Deadline& deadline);
  RedisFailure write_pending(size_t first, const Deadline& deadline);
  // Reads until `parser_` has a reply; kNone or why not.
  RedisFailure read_reply(RedisReply* out, const Deadline& deadline);
  bool retry_after_reset();
  void fail(RedisFailure why, std::string what);
  Breaker& breaker() { return breakers_[call_.kind == RedisCall::Kind::kRead ? 0 : 1]; }

  RedisEndpoint endpoint_;
  RedisLinkOptions options_;
  const Clock& clock_;
  int fd_ = -1;
  RespParser parser_;
  Breaker breakers_[2];               // reads, writes
  RedisCall call_;                    // of the call in progress
  Deadline deadline_;                 // its deadline
  std::vector<std::string> pending_;  // its commands, encoded
  size_t num_received_ = 0;           // replies read of pending_
  bool reused_ = false;               // its connection was open before it
  bool retried_ = false;
  bool sent_ = false;                 // send() succeeded and receive() is due
  RedisFailure failure_ = RedisFailure::kNone;
  std::string last_error_;
  double last_used_s_ = 0;
};

}  // namespace kvlm
