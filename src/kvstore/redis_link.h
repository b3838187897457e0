// One connection to one Redis server (hiredis, synchronous), with the
// failure handling a cache tier needs: connect and command timeouts, and a
// circuit breaker with exponential backoff. A failed call drops the
// connection and opens the breaker; while it is open, calls return at once
// (no network) so a dead server costs nothing per lookup; when it closes, the
// next call reconnects (AUTH, SELECT) and, on success, resets the backoff.
//
// Not thread-safe: one owner (the I/O thread, or a test) uses a link.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/clock.h"

struct redisContext;

namespace kvlm {

struct RedisEndpoint {
  std::string host;
  int port = 6379;
  std::string to_string() const { return host + ":" + std::to_string(port); }
  auto operator<=>(const RedisEndpoint&) const = default;
};

struct RedisLinkOptions {
  double connect_timeout_s = 0.25;
  double command_timeout_s = 0.5;
  std::string password;          // AUTH after connecting when not empty
  int db = 0;                    // SELECT after connecting when not 0
  double backoff_min_s = 0.1;    // breaker open time after the first failure
  double backoff_max_s = 5.0;    // doubling up to this
};

// A reply, copied out of hiredis's tree (binary-safe strings).
struct RedisReply {
  enum class Type { kNil, kString, kInteger, kStatus, kError, kArray };
  Type type = Type::kNil;
  std::string str;                  // kString, kStatus, kError
  int64_t integer = 0;              // kInteger
  std::vector<RedisReply> elements; // kArray
  bool is_error() const { return type == Type::kError; }
};

using RedisCommand = std::vector<std::string>;  // argv, binary-safe

class RedisLink {
 public:
  RedisLink(RedisEndpoint endpoint, RedisLinkOptions options, const Clock& clock = steady_clock());
  ~RedisLink();
  RedisLink(const RedisLink&) = delete;
  RedisLink& operator=(const RedisLink&) = delete;

  // Sends every command in one write and reads every reply (one round trip).
  // nullopt when the link is down: breaker open, connect failed, I/O error or
  // timeout (then the connection is dropped and the breaker opens). A Redis
  // error reply (OOM, MOVED, WRONGTYPE) is a reply, not a failure.
  std::optional<std::vector<RedisReply>> pipeline(std::span<const RedisCommand> commands);
  // pipeline() in two halves, so a caller can send to several servers before
  // reading any reply (one round trip for all of them). send() writes every
  // command; receive() reads their replies. False / nullopt as pipeline().
  bool send(std::span<const RedisCommand> commands);
  std::optional<std::vector<RedisReply>> receive();

  // False while the breaker is open (the last attempt failed).
  bool up() const { return num_failures_ == 0; }
  const RedisEndpoint& endpoint() const { return endpoint_; }
  // Why the last call failed ("" after a success).
  const std::string& last_error() const { return last_error_; }

 private:
  bool connect();
  void fail(std::string why);

  RedisEndpoint endpoint_;
  RedisLinkOptions options_;
  const Clock& clock_;
  redisContext* ctx_ = nullptr;  // owned; redisFree in the destructor
  int num_failures_ = 0;         // consecutive
  size_t num_pending_ = 0;       // replies send() left for receive()
  double retry_at_s_ = 0;        // breaker open until then
  std::string last_error_;
};

}  // namespace kvlm
