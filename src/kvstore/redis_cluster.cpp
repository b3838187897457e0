#include "kvstore/redis_cluster.h"

#include <algorithm>
#include <charconv>
#include <fstream>

#include <fmt/format.h>

#include "common/error.h"

namespace kvlm {
namespace {

std::optional<RedisEndpoint> parse_endpoint(std::string_view s) {
  const size_t colon = s.rfind(':');
  RedisEndpoint e;
  e.host = std::string(s.substr(0, colon));
  if (colon != std::string_view::npos) {
    std::string_view port = s.substr(colon + 1);
    auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), e.port);
    if (ec != std::errc() || p != port.data() + port.size() || e.port <= 0 || e.port > 65535) return std::nullopt;
  }
  if (e.host.empty()) return std::nullopt;
  return e;
}

// "MOVED 3999 127.0.0.1:6381" / "ASK 3999 127.0.0.1:6381".
struct Redirect {
  bool ask = false;
  int32_t slot = 0;
  RedisEndpoint to;
};
std::optional<Redirect> parse_redirect(const RedisReply& r) {
  if (!r.is_error()) return std::nullopt;
  std::string_view s = r.str;
  Redirect out;
  if (s.starts_with("MOVED ")) s.remove_prefix(6);
  else if (s.starts_with("ASK ")) {
    s.remove_prefix(4);
    out.ask = true;
  } else {
    return std::nullopt;
  }
  const size_t space = s.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  auto [p, ec] = std::from_chars(s.data(), s.data() + space, out.slot);
  if (ec != std::errc() || out.slot < 0 || out.slot >= kRedisNumSlots) return std::nullopt;
  auto to = parse_endpoint(s.substr(space + 1));
  if (!to) return std::nullopt;
  out.to = *to;
  return out;
}

}  // namespace

uint16_t crc16_xmodem(std::string_view bytes) {
  uint16_t crc = 0;
  for (unsigned char b : bytes) {
    crc = static_cast<uint16_t>(crc ^ (static_cast<uint16_t>(b) << 8));
    for (int bit = 0; bit < 8; ++bit)
      crc = static_cast<uint16_t>((crc & 0x8000) ? (crc << 1) ^ 0x1021 : (crc << 1));
  }
  return crc;
}

int32_t redis_key_slot(std::string_view key) {
  const size_t open = key.find('{');
  if (open != std::string_view::npos) {
    const size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) key = key.substr(open + 1, close - open - 1);
  }
  return crc16_xmodem(key) % kRedisNumSlots;
}

ReplyLimits cluster_slots_limits() {
  // Redis 7 nests range, node and node metadata arrays: depth 4.
  return ReplyLimits{.max_bulk_bytes = 1024,
                     .max_elements = kRedisNumSlots,
                     .max_total_elements = 16 * kRedisNumSlots,
                     .max_depth = 4,
                     .max_line_bytes = 4096};
}

std::vector<std::optional<RedisReply>> SingleRedisRouter::execute(std::span<const RedisCommand> commands,
                                                                  const RedisCall& call) {
  std::vector<std::optional<RedisReply>> out(commands.size());
  link_.reap_if_closed();  // a server restarted since the last call: connect afresh
  auto replies = link_.pipeline(commands, call);
  for (size_t i = 0; i < replies.size(); ++i) out[i] = std::move(replies[i]);
  return out;
}

ClusterRedisRouter::ClusterRedisRouter(std::vector<RedisEndpoint> seeds, RedisLinkOptions options, const Clock& clock)
    : seeds_(std::move(seeds)), options_(std::move(options)), clock_(clock) {
  slots_.fill(-1);
}

bool ClusterRedisRouter::known(const RedisEndpoint& e) const {
  return std::find(nodes_.begin(), nodes_.end(), e) != nodes_.end() ||
         std::find(seeds_.begin(), seeds_.end(), e) != seeds_.end();
}

size_t ClusterRedisRouter::num_open_connections() const {
  size_t n = 0;
  for (const auto& [e, l] : links_) n += l->connected() ? 1 : 0;
  return n;
}

bool ClusterRedisRouter::make_room(const RedisLink& wanted) {
  for (size_t open = num_open_connections(); open >= options_.max_cluster_connections; --open) {
    RedisLink* oldest = nullptr;
    for (auto& [e, l] : links_) {
      const bool busy = std::find(busy_.begin(), busy_.end(), l.get()) != busy_.end();
      if (l->connected() && l.get() != &wanted && !busy && (!oldest || l->last_used_s() < oldest->last_used_s()))
        oldest = l.get();
    }
    if (oldest == nullptr) return false;  // every open socket has replies pending in this call
    oldest->disconnect();
  }
  return true;
}

RedisLink* ClusterRedisRouter::link(const RedisEndpoint& e) {
  if (!known(e)) return nullptr;
  auto& l = links_[e];
  if (!l) l = std::make_unique<RedisLink>(e, options_, clock_);
  if (!l->connected() && !make_room(*l)) {
    last_error_ = fmt::format("{}: {} connections open, the cap", e.to_string(), options_.max_cluster_connections);
    if (last_failure_ == RedisFailure::kNone) last_failure_ = RedisFailure::kDown;
    return nullptr;
  }
  return l.get();
}

void ClusterRedisRouter::reap_idle() {
  for (auto& [e, l] : links_) l->reap_if_closed();
}

void ClusterRedisRouter::drop_links_outside_topology() {
  std::erase_if(links_, [&](const auto& kv) { return !known(kv.first); });
}

void ClusterRedisRouter::note_failure(const RedisLink& link) {
  last_error_ = link.last_error();
  if (last_failure_ == RedisFailure::kNone) last_failure_ = link.failure();
}

std::optional<RedisEndpoint> ClusterRedisRouter::slot_owner(int32_t slot) const {
  if (slot < 0 || slot >= kRedisNumSlots || slots_[slot] < 0) return std::nullopt;
  return nodes_[static_cast<size_t>(slots_[slot])];
}

bool ClusterRedisRouter::apply_slots(const RedisReply& reply) {
  if (reply.type != RedisReply::Type::kArray || reply.elements.empty()) return false;
  std::array<int16_t, kRedisNumSlots> slots;
  slots.fill(-1);
  std::vector<RedisEndpoint> nodes;
  for (const RedisReply& range : reply.elements) {
    // [start, end, [host, port, id, ...], replicas...]
    if (range.type != RedisReply::Type::kArray || range.elements.size() < 3) return false;
    const auto& master = range.elements[2];
    if (master.type != RedisReply::Type::kArray || master.elements.size() < 2) return false;
    const int64_t start = range.elements[0].integer, end = range.elements[1].integer;
    const int64_t port = master.elements[1].integer;
    if (start < 0 || end >= kRedisNumSlots || start > end || port <= 0 || port > 65535) return false;
    RedisEndpoint e{master.elements[0].str, static_cast<int>(port)};
    if (e.host.empty() || e.host == "?") return false;
    auto it = std::find(nodes.begin(), nodes.end(), e);
    const auto idx = static_cast<int16_t>(it - nodes.begin());
    if (it == nodes.end()) nodes.push_back(e);
    for (int64_t s = start; s <= end; ++s) slots[static_cast<size_t>(s)] = idx;
  }
  nodes_ = std::move(nodes);
  slots_ = slots;
  return true;
}

bool ClusterRedisRouter::refresh(const Deadline& deadline, RedisCall::Kind kind) {
  refreshed_this_call_ = true;
  last_refresh_s_ = clock_.now_s();
  std::vector<RedisEndpoint> candidates = nodes_;
  candidates.insert(candidates.end(), seeds_.begin(), seeds_.end());
  const RedisCommand cmd = {"CLUSTER", "SLOTS"};
  const RedisCall call{kind, deadline, cluster_slots_limits()};
  for (const auto& e : candidates) {
    if (deadline.passed(clock_)) break;
    RedisLink* l = link(e);
    if (l == nullptr) continue;
    auto r = l->pipeline(std::span(&cmd, 1), call);
    if (r.size() == 1 && apply_slots(r[0])) {
      map_stale_ = false;
      drop_links_outside_topology();
      return true;
    }
    if (r.empty()) note_failure(*l);
    else last_error_ = "CLUSTER SLOTS from " + e.to_string() + ": unexpected reply";
  }
  return false;
}

std::optional<RedisReply> ClusterRedisRouter::follow(const RedisCommand& cmd, RedisReply reply, int hops_left,
                                                     const RedisCall& call) {
  auto redirect = parse_redirect(reply);
  if (!redirect) return reply;
  auto refuse = [&](std::string why) -> std::optional<RedisReply> {
    last_error_ = std::move(why);
    if (last_failure_ == RedisFailure::kNone) last_failure_ = RedisFailure::kRedirect;
    return std::nullopt;
  };
  if (hops_left == 0) return refuse("redirected too many times: " + reply.str);
  ++num_redirects_;
  // A node the topology does not list: ask the cluster, never connect blindly.
  if (!known(redirect->to) && !refreshed_this_call_ && clock_.now_s() - last_refresh_s_ >= kMinRefreshIntervalS)
    refresh(call.deadline, call.kind);
  if (!known(redirect->to)) return refuse("redirected to " + redirect->to.to_string() + ", outside the topology");
  std::vector<RedisCommand> cmds;
  if (redirect->ask) {
    cmds.push_back({"ASKING"});
  } else if (auto it = std::find(nodes_.begin(), nodes_.end(), redirect->to); it != nodes_.end()) {
    slots_[static_cast<size_t>(redirect->slot)] = static_cast<int16_t>(it - nodes_.begin());
    map_stale_ = true;  // other slots probably moved too: reload before the next call
  }
  cmds.push_back(cmd);
  RedisLink* l = link(redirect->to);
  if (l == nullptr) return std::nullopt;
  auto replies = l->pipeline(cmds, call);
  if (replies.size() < cmds.size()) {
    note_failure(*l);
    return std::nullopt;
  }
  return follow(cmd, std::move(replies.back()), hops_left - 1, call);
}

std::vector<std::optional<RedisReply>> ClusterRedisRouter::execute(std::span<const RedisCommand> commands,
                                                                   const RedisCall& call) {
  std::vector<std::optional<RedisReply>> out(commands.size());
  refreshed_this_call_ = false;
  last_failure_ = RedisFailure::kNone;
  reap_idle();
  if (map_stale_ && (nodes_.empty() || clock_.now_s() - last_refresh_s_ >= kMinRefreshIntervalS))
    refresh(call.deadline, call.kind);
  if (nodes_.empty()) {
    up_ = false;
    if (last_failure_ == RedisFailure::kNone) last_failure_ = RedisFailure::kDown;
    return out;
  }
  // Group by owning node; a slot the map does not cover goes to any node,
  // whose MOVED reply names the owner.
  std::map<int16_t, std::vector<size_t>> groups;
  for (size_t i = 0; i < commands.size(); ++i) {
    int16_t idx = commands[i].size() > 1 ? slots_[static_cast<size_t>(redis_key_slot(commands[i][1]))] : 0;
    groups[idx < 0 ? int16_t{0} : idx].push_back(i);
  }
  // Send to every node first, then read: the nodes work in parallel and the
  // call costs one round trip, not one per node.
  struct Sent {
    std::vector<size_t> members;
    std::vector<RedisCommand> batch;
    RedisLink* link;
  };
  std::vector<Sent> sent;
  for (const auto& [idx, members] : groups) {
    Sent s{members, {}, link(nodes_[static_cast<size_t>(idx)])};
    for (size_t i : members) s.batch.push_back(commands[i]);
    if (s.link != nullptr && s.link->send(s.batch, call)) busy_.push_back(s.link);
    else if (s.link != nullptr) note_failure(*s.link);
    sent.push_back(std::move(s));
  }
  // Every reply is read before any redirect is followed: a redirect sends to
  // a node whose replies may still be waiting on its connection.
  std::vector<std::vector<RedisReply>> received;
  for (auto& s : sent) received.push_back(s.link != nullptr ? s.link->receive() : std::vector<RedisReply>{});
  busy_.clear();
  bool any_reply = groups.empty();
  for (size_t n = 0; n < sent.size(); ++n) {
    if (received[n].size() < sent[n].batch.size() && sent[n].link != nullptr) {
      note_failure(*sent[n].link);
      map_stale_ = true;  // a node may have failed over
    }
    any_reply = any_reply || !received[n].empty();
    for (size_t k = 0; k < received[n].size(); ++k)
      out[sent[n].members[k]] = follow(sent[n].batch[k], std::move(received[n][k]), 3, call);
  }
  up_ = any_reply;
  return out;
}

RedisUrl parse_redis_url(std::string_view url) {
  RedisUrl out;
  std::string_view rest = url;
  if (rest.starts_with("redis+cluster://")) {
    out.cluster = true;
    rest.remove_prefix(16);
  } else if (rest.starts_with("redis://")) {
    rest.remove_prefix(8);
    const size_t slash = rest.find('/');
    if (slash != std::string_view::npos) {
      std::string_view db = rest.substr(slash + 1);
      auto [p, ec] = std::from_chars(db.data(), db.data() + db.size(), out.db);
      if (db.empty() || ec != std::errc() || p != db.data() + db.size() || out.db < 0)
        throw_error(ErrorCode::kInvalidArgument, "--kv-redis {}: the database after '/' must be a number", url);
      rest = rest.substr(0, slash);
    }
  } else {
    throw_error(ErrorCode::kInvalidArgument,
                "--kv-redis {}: expected redis://HOST:PORT[/DB] or redis+cluster://HOST:PORT,HOST:PORT,...", url);
  }
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    auto e = parse_endpoint(rest.substr(0, comma));
    if (!e) throw_error(ErrorCode::kInvalidArgument, "--kv-redis {}: '{}' is not HOST:PORT", url, rest.substr(0, comma));
    out.endpoints.push_back(*e);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  }
  if (out.endpoints.empty()) throw_error(ErrorCode::kInvalidArgument, "--kv-redis {}: no HOST:PORT", url);
  if (!out.cluster && out.endpoints.size() > 1)
    throw_error(ErrorCode::kInvalidArgument, "--kv-redis {}: several servers need redis+cluster://", url);
  return out;
}

namespace {

std::string read_password(const std::string& path, const std::string& flag) {
  std::ifstream in(path);
  if (!in) throw_error(ErrorCode::kNotFound, "{} {}: cannot read it", flag, path);
  std::string line;
  std::getline(in, line);
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  if (line.empty()) throw_error(ErrorCode::kInvalidArgument, "{} {}: the first line is empty", flag, path);
  return line;
}

}  // namespace

std::unique_ptr<RedisRouter> open_redis(const std::string& url_text, const std::string& password_file,
                                        RedisLinkOptions options, const std::string& flag) {
  const RedisUrl url = parse_redis_url(url_text);
  if (!password_file.empty()) options.password = read_password(password_file, flag);
  options.db = url.db;
  if (url.cluster) return std::make_unique<ClusterRedisRouter>(url.endpoints, options);
  return std::make_unique<SingleRedisRouter>(url.endpoints[0], options);
}

}  // namespace kvlm
