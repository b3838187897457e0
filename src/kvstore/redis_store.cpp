#include "kvstore/redis_store.h"

#include <fstream>

#include "common/clock.h"
#include "common/error.h"

namespace kvlm {
namespace {

std::string read_password(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw_error(ErrorCode::kNotFound, "--kv-redis-password-file {}: cannot read it", path);
  std::string line;
  std::getline(in, line);
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  if (line.empty()) throw_error(ErrorCode::kInvalidArgument, "--kv-redis-password-file {}: the first line is empty", path);
  return line;
}

}  // namespace

std::unique_ptr<RedisStore> RedisStore::open(const RedisStoreConfig& config) {
  RedisUrl url = parse_redis_url(config.url);
  RedisLinkOptions link = config.link;
  if (!config.password_file.empty()) link.password = read_password(config.password_file);
  link.db = url.db;
  std::unique_ptr<RedisRouter> router;
  if (url.cluster) router = std::make_unique<ClusterRedisRouter>(url.endpoints, link);
  else router = std::make_unique<SingleRedisRouter>(url.endpoints[0], link);
  return std::unique_ptr<RedisStore>(new RedisStore(config, std::move(router)));
}

RedisStore::RedisStore(const RedisStoreConfig& config, std::unique_ptr<RedisRouter> router)
    : config_(config), key_prefix_("kvlm:" + hash_hex(config.ns) + ":"), router_(std::move(router)) {}

std::string RedisStore::key(const BlockHash& h) const { return key_prefix_ + hash_hex(h.value); }

int64_t RedisStore::num_redirects() const { return num_redirects_.load(std::memory_order_relaxed); }

std::vector<std::optional<RedisReply>> RedisStore::execute(std::span<const RedisCommand> commands) {
  auto replies = router_->execute(commands);
  up_.store(router_->up(), std::memory_order_relaxed);
  num_redirects_.store(router_->num_redirects(), std::memory_order_relaxed);
  return replies;
}

void RedisStore::note_failure(const char* what, const std::string& why) {
  counters_.num_errors.fetch_add(1, std::memory_order_relaxed);
  warn_.warn("{}: {} (treated as a miss)", what, why);
}

size_t RedisStore::probe(std::span<const BlockHash> hashes) {
  std::vector<RedisCommand> cmds;
  for (const auto& h : hashes) cmds.push_back({"EXISTS", key(h)});
  std::lock_guard<std::mutex> lock(mu_);
  counters_.num_lookups.fetch_add(1, std::memory_order_relaxed);
  auto replies = execute(cmds);
  size_t n = 0;
  while (n < replies.size() && replies[n] && replies[n]->type == RedisReply::Type::kInteger &&
         replies[n]->integer == 1)
    ++n;
  if (n < replies.size() && (!replies[n] || replies[n]->is_error()))
    note_failure("EXISTS", replies[n] ? replies[n]->str : router_->last_error());
  return n;
}

std::vector<KvRecord> RedisStore::load(std::span<const BlockHash> hashes) {
  std::vector<RedisCommand> cmds;
  for (const auto& h : hashes) cmds.push_back({"GET", key(h)});
  const double t0 = steady_clock().now_s();
  std::lock_guard<std::mutex> lock(mu_);
  counters_.num_lookups.fetch_add(1, std::memory_order_relaxed);
  counters_.num_lookup_blocks.fetch_add(static_cast<int64_t>(hashes.size()), std::memory_order_relaxed);
  auto replies = execute(cmds);
  std::vector<KvRecord> out;
  for (size_t i = 0; i < replies.size(); ++i) {
    const auto& r = replies[i];
    if (!r || r->is_error()) {
      note_failure("GET", r ? r->str : router_->last_error());
      break;
    }
    if (r->type != RedisReply::Type::kString) break;  // nil: not held (never written, evicted, expired)
    counters_.num_bytes_read.fetch_add(static_cast<int64_t>(r->str.size()), std::memory_order_relaxed);
    KvRecord rec;
    RecordStatus st = decode_record(r->str, config_.ns, hashes[i], &rec);
    if (st != RecordStatus::kOk) {
      counters_.num_corrupt.fetch_add(1, std::memory_order_relaxed);
      warn_.warn("refusing {}: {}", cmds[i][1], record_status_name(st));
      break;
    }
    out.push_back(std::move(rec));
  }
  counters_.num_hit_blocks.fetch_add(static_cast<int64_t>(out.size()), std::memory_order_relaxed);
  if (!out.empty()) counters_.observe_load_latency(steady_clock().now_s() - t0);
  return out;
}

size_t RedisStore::store(std::span<const KvRecord> records) {
  std::vector<RedisCommand> cmds;
  for (const auto& r : records) {
    RedisCommand c = {"SET", key(r.hash), encode_record(config_.ns, r), "NX"};
    if (config_.ttl_s > 0) {
      c.push_back("EX");
      c.push_back(std::to_string(config_.ttl_s));
    }
    cmds.push_back(std::move(c));
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto replies = execute(cmds);
  size_t num_new = 0;
  for (size_t i = 0; i < replies.size(); ++i) {
    const auto& r = replies[i];
    if (r && r->type == RedisReply::Type::kStatus) {  // OK: written
      ++num_new;
      counters_.num_blocks_written.fetch_add(1, std::memory_order_relaxed);
      counters_.num_bytes_written.fetch_add(static_cast<int64_t>(cmds[i][2].size()), std::memory_order_relaxed);
    } else if (r && r->type == RedisReply::Type::kNil) {
      // NX: another writer got there first; the tier holds the block.
    } else {
      // Down, timed out, -OOM (noeviction), or any other error reply.
      counters_.num_blocks_dropped.fetch_add(1, std::memory_order_relaxed);
      note_failure("SET", r ? r->str : router_->last_error());
    }
  }
  return num_new;
}

TierStats RedisStore::stats() const {
  TierStats s;
  s.name = "redis";
  counters_.snapshot(s);
  s.up = up_.load(std::memory_order_relaxed);  // no lock: a call may be waiting on a timeout
  return s;
}

}  // namespace kvlm
