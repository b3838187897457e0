#include "router/registry.h"

#include <fmt/format.h>

#include "common/error.h"
#include "common/log.h"
#include "kvstore/redis_cluster.h"

namespace kvlm::router {
namespace {

std::unique_ptr<RedisRouter> open_registry(const RegistryConfig& c) {
  if (c.ttl.count() < 300) throw_error(ErrorCode::kInvalidArgument, "the registry TTL must be at least 300 ms");
  RedisLinkOptions options;
  options.command_timeout_s = 1.0;
  return open_redis(c.url, c.password_file, options, "--registry-password-file");
}

bool ok(const std::optional<RedisReply>& r) { return r && !r->is_error(); }

}  // namespace

std::string registry_set_key(const std::string& name) { return "{kvlm-registry:" + name + "}:workers"; }

std::string registry_worker_key(const std::string& name, const std::string& url) {
  return "{kvlm-registry:" + name + "}:worker:" + url;
}

// ---- RegistryMember ------------------------------------------------------------

RegistryMember::RegistryMember(RegistryConfig config, std::string advertise_url)
    : config_(std::move(config)), url_(std::move(advertise_url)), redis_(open_registry(config_)) {
  thread_ = std::thread([this] { loop(); });
}

RegistryMember::~RegistryMember() {
  leave();
}

bool RegistryMember::beat() {
  const std::vector<RedisCommand> cmds = {
      {"SET", registry_worker_key(config_.name, url_), "1", "PX", std::to_string(config_.ttl.count())},
      {"SADD", registry_set_key(config_.name), url_}};
  const auto replies = redis_->execute(cmds);
  const bool done = replies.size() == 2 && ok(replies[0]) && ok(replies[1]);
  if (!done && !warned_) log_warn("registry {}: cannot register {}: {}", config_.url, url_, redis_->last_error());
  if (done && warned_) log_info("registry {}: registered {} again", config_.url, url_);
  warned_ = !done;
  return done;
}

void RegistryMember::loop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    lock.unlock();
    beat();
    lock.lock();
    cv_.wait_for(lock, config_.ttl / 3, [this] { return stopping_; });
  }
}

void RegistryMember::leave() {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  const std::vector<RedisCommand> cmds = {{"DEL", registry_worker_key(config_.name, url_)},
                                          {"SREM", registry_set_key(config_.name), url_}};
  redis_->execute(cmds);
  log_info("registry {}: {} left", config_.url, url_);
}

// ---- RegistryWatcher -----------------------------------------------------------

RegistryWatcher::RegistryWatcher(RegistryConfig config, OnMembers on_members)
    : config_(std::move(config)), on_members_(std::move(on_members)), redis_(open_registry(config_)) {
  thread_ = std::thread([this] { loop(); });
}

RegistryWatcher::~RegistryWatcher() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

bool RegistryWatcher::list(std::vector<std::string>& urls) {
  const std::vector<RedisCommand> members = {{"SMEMBERS", registry_set_key(config_.name)}};
  const auto listed = redis_->execute(members);
  if (listed.size() != 1 || !ok(listed[0]) || listed[0]->type != RedisReply::Type::kArray) return false;
  std::vector<std::string> candidates;
  std::vector<RedisCommand> checks;
  for (const RedisReply& m : listed[0]->elements) {
    if (m.type != RedisReply::Type::kString) continue;
    candidates.push_back(m.str);
    checks.push_back({"EXISTS", registry_worker_key(config_.name, m.str)});
  }
  const auto alive = redis_->execute(checks);
  if (alive.size() != checks.size()) return false;
  std::vector<RedisCommand> gone;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (!ok(alive[i]) || alive[i]->type != RedisReply::Type::kInteger) return false;
    if (alive[i]->integer > 0) {
      urls.push_back(candidates[i]);
    } else {
      gone.push_back({"SREM", registry_set_key(config_.name), candidates[i]});  // its key expired: it died
    }
  }
  if (!gone.empty()) redis_->execute(gone);
  return true;
}

void RegistryWatcher::loop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    lock.unlock();
    std::vector<std::string> urls;
    const bool listed = list(urls);
    if (listed) on_members_(urls);
    if (!listed && !warned_)
      log_warn("registry {}: cannot list the workers ({}); keeping the last members", config_.url,
               redis_->last_error());
    warned_ = !listed;
    lock.lock();
    cv_.wait_for(lock, config_.poll, [this] { return stopping_; });
  }
}

}  // namespace kvlm::router
