// Where a Redis command goes: one server, or the node of a Redis Cluster
// that owns its key's hash slot.
//
// Cluster routing (Redis Cluster specification): a key's slot is
// CRC16-XMODEM(key, or its {hash tag}) mod 16384; the slot map comes from
// CLUSTER SLOTS on any reachable node. Commands are grouped per node and
// pipelined (one round trip per node touched). A `-MOVED slot host:port`
// reply means the map is stale: the slot is pointed at the new owner, the
// command is resent there, and the whole map is refreshed before the next
// call. A `-ASK slot host:port` reply (a slot being migrated) resends the
// command to that node once, after ASKING, without changing the map.
// Keys are routed one by one; kvlm's keys carry no hash tags, so a chain's
// blocks spread over the nodes.
//
// Connections are bounded (docs/kv-tiers.md "Deadlines and bounds"): only
// to the seeds and the masters of the topology. A redirect to a node the
// topology does not list reloads the topology (at most once per call and
// every kMinRefreshIntervalS) instead of connecting; if the node is still
// not listed the command is a miss. At most max_cluster_connections sockets
// are open (the least recently used is closed first); idle sockets the
// server closed are reaped before each call, and the links of nodes that
// left the topology are dropped with it. Every call honours its deadline
// through every redirect and refresh.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvstore/redis_link.h"

namespace kvlm {

// Bounds on a CLUSTER SLOTS reply: one range per slot at most, each a few
// small fields and its replicas.
ReplyLimits cluster_slots_limits();

// CRC16-XMODEM (poly 0x1021, init 0): the checksum Redis Cluster slots use.
uint16_t crc16_xmodem(std::string_view bytes);
// The hash slot of `key`, honouring a non-empty {hash tag}.
int32_t redis_key_slot(std::string_view key);
inline constexpr int32_t kRedisNumSlots = 16384;

// Commands whose key is argv[1]; replies in command order, nullopt where the
// owning server could not be reached.
class RedisRouter {
 public:
  virtual ~RedisRouter() = default;
  // `call` says whether this is a lookup (its breaker, RedisLink) and
  // bounds the time and the replies.
  virtual std::vector<std::optional<RedisReply>> execute(std::span<const RedisCommand> commands,
                                                         const RedisCall& call) = 0;
  std::vector<std::optional<RedisReply>> execute(std::span<const RedisCommand> commands) {
    return execute(commands, RedisCall{});
  }
  // False while every server this router needs is unreachable (single
  // server: its last call failed; cluster: no node answered the last call).
  virtual bool up() const = 0;
  virtual std::string last_error() const = 0;
  // Why the last call's missing replies are missing (the first failure).
  virtual RedisFailure last_failure() const = 0;
  int64_t num_redirects() const { return num_redirects_; }

 protected:
  int64_t num_redirects_ = 0;  // MOVED and ASK replies followed
};

class SingleRedisRouter final : public RedisRouter {
 public:
  SingleRedisRouter(RedisEndpoint endpoint, RedisLinkOptions options) : link_(std::move(endpoint), options) {}
  using RedisRouter::execute;
  std::vector<std::optional<RedisReply>> execute(std::span<const RedisCommand> commands,
                                                 const RedisCall& call) override;
  bool up() const override { return link_.up(); }
  std::string last_error() const override { return link_.last_error(); }
  RedisFailure last_failure() const override { return link_.failure(); }

 private:
  RedisLink link_;
};

class ClusterRedisRouter final : public RedisRouter {
 public:
  static constexpr double kMinRefreshIntervalS = 0.1;

  ClusterRedisRouter(std::vector<RedisEndpoint> seeds, RedisLinkOptions options, const Clock& clock = steady_clock());
  using RedisRouter::execute;
  std::vector<std::optional<RedisReply>> execute(std::span<const RedisCommand> commands,
                                                 const RedisCall& call) override;
  bool up() const override { return up_; }
  std::string last_error() const override { return last_error_; }
  RedisFailure last_failure() const override { return last_failure_; }
  // The node that owns `slot` in the current map (tests).
  std::optional<RedisEndpoint> slot_owner(int32_t slot) const;
  // Reloads the slot map from CLUSTER SLOTS by `deadline`; false if no node answered.
  bool refresh(const Deadline& deadline = Deadline::none(), RedisCall::Kind kind = RedisCall::Kind::kWrite);
  // Links held (topology nodes and seeds met so far) and open sockets (tests).
  size_t num_links() const { return links_.size(); }
  size_t num_open_connections() const;

 private:
  // The link of a seed or topology node (nullptr for any other endpoint),
  // with a socket slot free for it under the cap unless `busy` holds it.
  RedisLink* link(const RedisEndpoint& e);
  bool known(const RedisEndpoint& e) const;
  bool make_room(const RedisLink& wanted);
  void reap_idle();
  bool apply_slots(const RedisReply& reply);
  void drop_links_outside_topology();
  // Follows one MOVED/ASK reply for command `cmd`; returns its final reply.
  std::optional<RedisReply> follow(const RedisCommand& cmd, RedisReply reply, int hops_left, const RedisCall& call);
  void note_failure(const RedisLink& link);

  std::vector<RedisEndpoint> seeds_;
  RedisLinkOptions options_;
  const Clock& clock_;
  std::map<RedisEndpoint, std::unique_ptr<RedisLink>> links_;
  std::vector<RedisLink*> busy_;                 // links with replies pending in this call
  std::vector<RedisEndpoint> nodes_;             // index -> endpoint
  std::array<int16_t, kRedisNumSlots> slots_{};  // slot -> index into nodes_, -1: unknown
  bool map_stale_ = true;
  bool refreshed_this_call_ = false;
  double last_refresh_s_ = -1e9;
  bool up_ = true;
  std::string last_error_;
  RedisFailure last_failure_ = RedisFailure::kNone;
};

// Parses redis://HOST:PORT[/DB] (one server) or
// redis+cluster://HOST:PORT,HOST:PORT,... (cluster seeds). Throws
// Error(kInvalidArgument) naming the flag on anything else.
struct RedisUrl {
  bool cluster = false;
  std::vector<RedisEndpoint> endpoints;
  int db = 0;
};
RedisUrl parse_redis_url(std::string_view url);

// The router for `url` (parse_redis_url), with the password from the first
// line of `password_file` ("" for none). Throws Error(kInvalidArgument or
// kNotFound) naming `flag` for a bad URL or an unreadable file; never for a
// server that is down (links connect lazily).
std::unique_ptr<RedisRouter> open_redis(const std::string& url, const std::string& password_file,
                                        RedisLinkOptions options, const std::string& flag);

}  // namespace kvlm
