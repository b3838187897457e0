#include "server/response_store.h"

#include <span>

#include "common/log.h"
#include "kvstore/redis_cluster.h"

namespace kvlm {

namespace {

std::string redis_key(const std::string& id) { return "kvlm:response:" + id; }

}  // namespace

ResponseStore::ResponseStore(size_t capacity) : capacity_(capacity) {}

ResponseStore::~ResponseStore() = default;

void ResponseStore::share(std::unique_ptr<RedisRouter> redis, int64_t ttl_s) {
  std::lock_guard lock(redis_mu_);
  redis_ = std::move(redis);
  ttl_s_ = ttl_s;
}

void ResponseStore::put(const std::string& id, Stored s) {
  {
    std::lock_guard lock(redis_mu_);
    if (redis_) {
      const nlohmann::json record = {{"response", s.response}, {"messages", s.messages}};
      const RedisCommand set = {"SET", redis_key(id), record.dump(), "EX", std::to_string(ttl_s_)};
      const auto replies = redis_->execute(std::span(&set, 1));
      if (!replies[0] || replies[0]->is_error())
        log_warn("response {}: not shared in Redis ({})", id, redis_->last_error());
    }
  }
  std::lock_guard lock(mu_);
  if (by_id_.insert_or_assign(id, std::move(s)).second) order_.push_back(id);
  while (by_id_.size() > capacity_ && !order_.empty()) {
    by_id_.erase(order_.front());
    order_.pop_front();
  }
  // Erased ids left behind: drop them when they are most of the queue.
  if (order_.size() > 2 * capacity_) {
    std::deque<std::string> kept;
    for (std::string& k : order_)
      if (by_id_.count(k)) kept.push_back(std::move(k));
    order_ = std::move(kept);
  }
}

std::optional<ResponseStore::Stored> ResponseStore::get(const std::string& id) const {
  {
    std::lock_guard lock(mu_);
    if (const auto it = by_id_.find(id); it != by_id_.end()) return it->second;
  }
  std::lock_guard lock(redis_mu_);
  if (!redis_) return std::nullopt;
  const RedisCommand get = {"GET", redis_key(id)};
  const auto replies = redis_->execute(std::span(&get, 1));
  if (!replies[0] || replies[0]->type != RedisReply::Type::kString) return std::nullopt;
  const nlohmann::json record = nlohmann::json::parse(replies[0]->str, nullptr, /*allow_exceptions=*/false);
  if (!record.is_object() || !record.contains("response") || !record.contains("messages")) return std::nullopt;
  return Stored{record["response"], record["messages"]};
}

bool ResponseStore::erase(const std::string& id) {
  bool erased = false;
  {
    std::lock_guard lock(mu_);
    erased = by_id_.erase(id) > 0;
  }
  std::lock_guard lock(redis_mu_);
  if (!redis_) return erased;
  const RedisCommand del = {"DEL", redis_key(id)};
  const auto replies = redis_->execute(std::span(&del, 1));
  return erased || (replies[0] && replies[0]->type == RedisReply::Type::kInteger && replies[0]->integer > 0);
}

}  // namespace kvlm
