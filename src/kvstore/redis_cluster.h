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
  virtual std::vector<std::optional<RedisReply>> execute(std::span<const RedisCommand> commands) = 0;
  // False while every server this router needs is unreachable (single
  // server: its breaker is open; cluster: no node answered the last call).
  virtual bool up() const = 0;
  virtual std::string last_error() const = 0;
  int64_t num_redirects() const { return num_redirects_; }

 protected:
  int64_t num_redirects_ = 0;  // MOVED and ASK replies followed
};

class SingleRedisRouter final : public RedisRouter {
 public:
  SingleRedisRouter(RedisEndpoint endpoint, RedisLinkOptions options) : link_(std::move(endpoint), options) {}
  std::vector<std::optional<RedisReply>> execute(std::span<const RedisCommand> commands) override;
  bool up() const override { return link_.up(); }
  std::string last_error() const override { return link_.last_error(); }

 private:
  RedisLink link_;
};

class ClusterRedisRouter final : public RedisRouter {
 public:
  ClusterRedisRouter(std::vector<RedisEndpoint> seeds, RedisLinkOptions options);
  std::vector<std::optional<RedisReply>> execute(std::span<const RedisCommand> commands) override;
  bool up() const override { return up_; }
  std::string last_error() const override { return last_error_; }
  // The node that owns `slot` in the current map (tests).
  std::optional<RedisEndpoint> slot_owner(int32_t slot) const;
  // Reloads the slot map from CLUSTER SLOTS; false if no node answered.
  bool refresh();

 private:
  RedisLink& link(const RedisEndpoint& e);
  bool apply_slots(const RedisReply& reply);
  // Follows one MOVED/ASK reply for command `cmd`; returns its final reply.
  std::optional<RedisReply> follow(const RedisCommand& cmd, RedisReply reply, int hops_left);

  std::vector<RedisEndpoint> seeds_;
  RedisLinkOptions options_;
  std::map<RedisEndpoint, std::unique_ptr<RedisLink>> links_;
  std::vector<RedisEndpoint> nodes_;             // index -> endpoint
  std::array<int16_t, kRedisNumSlots> slots_{};  // slot -> index into nodes_, -1: unknown
  bool map_stale_ = true;
  bool up_ = true;
  std::string last_error_;
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

}  // namespace kvlm
