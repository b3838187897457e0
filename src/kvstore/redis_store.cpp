#include "kvstore/redis_store.h"

#include <algorithm>

#include "common/clock.h"
#include "common/error.h"

namespace kvlm {
namespace {

// Keys remembered for overwriting; past this the oldest knowledge is dropped
// (the next lookup that meets such a key refuses it again and re-adds it).
constexpr size_t kMaxOverwriteKeys = 4096;

// SET, EXISTS and AUTH replies are statuses, integers and short errors.
const ReplyLimits kSmallReplies{.max_bulk_bytes = 1024, .max_elements = 0, .max_total_elements = 0};

// Whether a reply shows a working server: anything but an error, or an
// error that is about the key or the memory, not the server (a full Redis
// under noeviction, another client's value under our key).
bool usable(const std::optional<RedisReply>& r) {
  return r && (!r->is_error() || r->str.starts_with("OOM") || r->str.starts_with("WRONGTYPE"));
}

}  // namespace

std::unique_ptr<RedisStore> RedisStore::open(const RedisStoreConfig& config) {
  if (config.ttl_s <= 0)
    throw_error(ErrorCode::kInvalidArgument, "--kv-redis-ttl must be positive: every record needs an expiry");
  return std::unique_ptr<RedisStore>(
      new RedisStore(config, open_redis(config.url, config.password_file, config.link, "--kv-redis-password-file")));
}

RedisStore::RedisStore(const RedisStoreConfig& config, std::unique_ptr<RedisRouter> router)
    : config_(config),
      codec_(config.ns, config.security),
      key_prefix_("kvlm:" + hash_hex(codec_.tier_id()) + ":"),
      get_limits_{.max_elements = 0, .max_total_elements = 0, .max_depth = 0},
      router_(std::move(router)) {
  if (config.payload_bytes > 0)
    get_limits_.max_bulk_bytes = codec_.max_accepted_bytes(static_cast<size_t>(config.block_size), config.payload_bytes);
}

std::string RedisStore::key(const BlockHash& h) const { return key_prefix_ + hash_hex(codec_.name(h)); }

int64_t RedisStore::num_redirects() const { return num_redirects_.load(std::memory_order_relaxed); }

std::vector<std::optional<RedisReply>> RedisStore::execute(std::span<const RedisCommand> commands,
                                                           const RedisCall& call) {
  auto replies = router_->execute(commands, call);
  if (!replies.empty()) up_.store(std::any_of(replies.begin(), replies.end(), usable), std::memory_order_relaxed);
  num_redirects_.store(router_->num_redirects(), std::memory_order_relaxed);
  return replies;
}

void RedisStore::note_missing(const std::string& key) {
  switch (router_->last_failure()) {
    case RedisFailure::kTimeout: refuse(TierRefusal::kTimeout, key, "the lookup's deadline passed"); break;
    case RedisFailure::kOversize: refuse(TierRefusal::kOversize, key, router_->last_error()); break;
    default: note_failure("GET", router_->last_error());
  }
}

void RedisStore::note_failure(const char* what, const std::string& why) {
  counters_.num_errors.fetch_add(1, std::memory_order_relaxed);
  warn_.warn("{}: {} (treated as a miss)", what, why);
}

void RedisStore::refuse(TierRefusal why, const std::string& key, std::string_view detail) {
  counters_.refuse(why);
  if (why != TierRefusal::kTimeout) {
    counters_.num_corrupt.fetch_add(1, std::memory_order_relaxed);
    if (overwrite_.size() >= kMaxOverwriteKeys) overwrite_.clear();
    overwrite_.insert(key);
  }
  warn_.warn("refusing {}: {}", key, detail);
}

size_t RedisStore::probe(std::span<const BlockHash> hashes) {
  std::vector<RedisCommand> cmds;
  for (const auto& h : hashes) cmds.push_back({"EXISTS", key(h)});
  std::lock_guard<std::mutex> lock(mu_);
  counters_.num_lookups.fetch_add(1, std::memory_order_relaxed);
  auto replies = execute(cmds, RedisCall{RedisCall::Kind::kRead, Deadline::none(), kSmallReplies});
  size_t n = 0;
  while (n < replies.size() && replies[n] && replies[n]->type == RedisReply::Type::kInteger &&
         replies[n]->integer == 1)
    ++n;
  if (n < replies.size() && (!replies[n] || replies[n]->is_error()))
    note_failure("EXISTS", replies[n] ? replies[n]->str : router_->last_error());
  return n;
}

std::optional<KvRecord> RedisStore::take_reply(const std::optional<RedisReply>& r, const BlockHash& h,
                                               const std::string& key) {
  if (!r) {
    note_missing(key);
    return std::nullopt;
  }
  if (r->type == RedisReply::Type::kNil) return std::nullopt;  // not held (never written, evicted, expired)
  if (r->is_error() && !r->str.starts_with("WRONGTYPE")) {
    note_failure("GET", r->str);
    return std::nullopt;
  }
  if (r->type != RedisReply::Type::kString) {
    // Someone else's value under our key (a list, a counter): replaced when the block is stored.
    refuse(TierRefusal::kWrongType, key, "not a string");
    return std::nullopt;
  }
  counters_.num_bytes_read.fetch_add(static_cast<int64_t>(r->str.size()), std::memory_order_relaxed);
  KvRecord rec;
  const RecordStatus st = codec_.decode(r->str, h, &rec);
  if (st != RecordStatus::kOk) {
    refuse(refusal_of(st), key, record_status_name(st));
    return std::nullopt;
  }
  return rec;
}

std::vector<KvRecord> RedisStore::load(std::span<const BlockHash> hashes, const Deadline& deadline) {
  std::vector<RedisCommand> cmds;
  for (const auto& h : hashes) cmds.push_back({"GET", key(h)});
  const double t0 = steady_clock().now_s();
  std::lock_guard<std::mutex> lock(mu_);
  counters_.num_lookups.fetch_add(1, std::memory_order_relaxed);
  counters_.num_lookup_blocks.fetch_add(static_cast<int64_t>(hashes.size()), std::memory_order_relaxed);
  if (deadline.passed() && !hashes.empty()) {  // it waited its whole time in the queue
    counters_.refuse(TierRefusal::kTimeout);
    return {};
  }
  auto replies = execute(cmds, RedisCall{RedisCall::Kind::kRead, deadline, get_limits_});
  std::vector<KvRecord> out;
  for (size_t i = 0; i < replies.size(); ++i) {
    // A missing reply ends the hit and is counted once. Past the end of the
    // hit, values are still checked, so that every one that fails
    // verification is marked for overwriting, never kept by NX.
    if (!replies[i] && out.size() < i) continue;
    std::optional<KvRecord> rec = take_reply(replies[i], hashes[i], cmds[i][1]);
    if (rec && out.size() == i) out.push_back(std::move(*rec));
  }
  counters_.num_hit_blocks.fetch_add(static_cast<int64_t>(out.size()), std::memory_order_relaxed);
  if (!out.empty()) counters_.observe_load_latency(steady_clock().now_s() - t0);
  return out;
}

size_t RedisStore::store(std::span<const KvRecord> records) {
  const std::string ttl = std::to_string(config_.ttl_s);
  std::vector<RedisCommand> cmds;
  std::vector<bool> replacing;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& r : records) {
    std::string k = key(r.hash);
    // NX keeps another server's copy of the block; a refused value is replaced.
    replacing.push_back(overwrite_.erase(k) > 0);
    RedisCommand c = {"SET", std::move(k), codec_.encode(r), "EX", ttl};
    if (!replacing.back()) c.push_back("NX");
    cmds.push_back(std::move(c));
  }
  auto replies = execute(cmds, RedisCall{RedisCall::Kind::kWrite, Deadline::none(), kSmallReplies});
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
      if (replacing[i]) overwrite_.insert(cmds[i][1]);  // still to be replaced
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
