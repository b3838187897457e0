#include "server/response_store.h"

#include <span>

#include "common/log.h"
#include "kvstore/redis_cluster.h"

namespace kvlm {

namespace {

std::string redis_key(const std::string& id) { return "kvlm:response:" + id; }
std::string redis_item_key(const std::string& item_id) { return "kvlm:response-item:" + item_id; }

// Calls `f` on each item of `s` that has an id: its output's, then its input's.
template <typename F>
void for_each_item(const ResponseStore::Stored& s, F f) {
  const auto output = s.response.find("output");
  for (const nlohmann::json* items : {output != s.response.end() ? &*output : nullptr, &s.input_items}) {
    if (!items || !items->is_array()) continue;
    for (const nlohmann::json& item : *items) {
      const auto id = item.is_object() ? item.find("id") : item.end();
      if (id != item.end() && id->is_string()) f(id->get_ref<const std::string&>(), item);
    }
  }
}

// The item of `s` named `item_id`.
std::optional<nlohmann::json> item_in(const ResponseStore::Stored& s, const std::string& item_id) {
  std::optional<nlohmann::json> found;
  for_each_item(s, [&](const std::string& id, const nlohmann::json& item) {
    if (!found && id == item_id) found = item;
  });
  return found;
}

}  // namespace

std::vector<std::string> item_ids(const ResponseStore::Stored& s) {
  std::vector<std::string> out;
  for_each_item(s, [&](const std::string& id, const nlohmann::json&) { out.push_back(id); });
  return out;
}

ResponseStore::ResponseStore(size_t capacity) : capacity_(capacity) {}

ResponseStore::~ResponseStore() = default;

void ResponseStore::share(std::unique_ptr<RedisRouter> redis, int64_t ttl_s) {
  std::lock_guard lock(redis_mu_);
  redis_ = std::move(redis);
  ttl_s_ = ttl_s;
}

void ResponseStore::index_items(const std::string& id, const Stored& s) {
  for (const std::string& item : item_ids(s)) response_of_item_.try_emplace(item, id);
}

void ResponseStore::unindex_items(const std::string& id, const Stored& s) {
  for (const std::string& item : item_ids(s))
    if (const auto it = response_of_item_.find(item); it != response_of_item_.end() && it->second == id)
      response_of_item_.erase(it);
}

void ResponseStore::put_shared(const std::string& id, const Stored& s) {
  std::lock_guard lock(redis_mu_);
  if (!redis_) return;
  const nlohmann::json record = {{"response", s.response}, {"messages", s.messages}, {"input_items", s.input_items},
                       {"owner", s.owner}};
  const std::string ttl = std::to_string(ttl_s_);
  std::vector<RedisCommand> commands = {{"SET", redis_key(id), record.dump(), "EX", ttl}};
  // NX: an item given again in a later request stays its first response's.
  for (const std::string& item : item_ids(s)) commands.push_back({"SET", redis_item_key(item), id, "EX", ttl, "NX"});
  const auto replies = redis_->execute(commands);
  if (!replies[0] || replies[0]->is_error())
    log_warn("response {}: not shared in Redis ({})", id, redis_->last_error());
}

void ResponseStore::put(const std::string& id, Stored s) {
  put_shared(id, s);
  std::lock_guard lock(mu_);
  if (const auto it = by_id_.find(id); it != by_id_.end()) unindex_items(id, it->second);
  index_items(id, s);
  if (by_id_.insert_or_assign(id, std::move(s)).second) order_.push_back(id);
  while (by_id_.size() > capacity_ && !order_.empty()) {
    if (const auto it = by_id_.find(order_.front()); it != by_id_.end()) {
      unindex_items(it->first, it->second);
      by_id_.erase(it);
    }
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

std::optional<ResponseStore::Stored> ResponseStore::get_shared(const std::string& id) const {
  std::lock_guard lock(redis_mu_);
  if (!redis_) return std::nullopt;
  const RedisCommand get = {"GET", redis_key(id)};
  const auto replies = redis_->execute(std::span(&get, 1));
  if (!replies[0] || replies[0]->type != RedisReply::Type::kString) return std::nullopt;
  const nlohmann::json record = nlohmann::json::parse(replies[0]->str, nullptr, /*allow_exceptions=*/false);
  if (!record.is_object() || !record.contains("response") || !record.contains("messages")) return std::nullopt;
  Stored s{record["response"], record["messages"]};
  // A record an older server wrote has neither: no input items, no owner.
  if (const auto it = record.find("input_items"); it != record.end() && it->is_array()) s.input_items = *it;
  if (const auto it = record.find("owner"); it != record.end() && it->is_string()) s.owner = *it;
  return s;
}

std::optional<ResponseStore::Stored> ResponseStore::get(const std::string& id) const {
  {
    std::lock_guard lock(mu_);
    if (const auto it = by_id_.find(id); it != by_id_.end()) return it->second;
  }
  return get_shared(id);
}

std::optional<ResponseStore::FoundItem> ResponseStore::find_item(const std::string& item_id) const {
  {
    std::lock_guard lock(mu_);
    if (const auto it = response_of_item_.find(item_id); it != response_of_item_.end()) {
      const Stored& s = by_id_.at(it->second);
      if (std::optional<nlohmann::json> item = item_in(s, item_id)) return FoundItem{std::move(*item), s.owner};
    }
  }
  std::string response_id;
  {
    std::lock_guard lock(redis_mu_);
    if (!redis_) return std::nullopt;
    const RedisCommand get = {"GET", redis_item_key(item_id)};
    const auto replies = redis_->execute(std::span(&get, 1));
    if (!replies[0] || replies[0]->type != RedisReply::Type::kString) return std::nullopt;
    response_id = replies[0]->str;
  }
  const std::optional<Stored> s = get(response_id);
  if (!s) return std::nullopt;  // deleted: its items' keys only wait for their expiry
  std::optional<nlohmann::json> item = item_in(*s, item_id);
  if (!item) return std::nullopt;
  return FoundItem{std::move(*item), s->owner};
}

bool ResponseStore::erase(const std::string& id) {
  bool erased = false;
  {
    std::lock_guard lock(mu_);
    if (const auto it = by_id_.find(id); it != by_id_.end()) {
      unindex_items(id, it->second);
      by_id_.erase(it);
      erased = true;
    }
  }
  std::lock_guard lock(redis_mu_);
  if (!redis_) return erased;
  const RedisCommand del = {"DEL", redis_key(id)};
  const auto replies = redis_->execute(std::span(&del, 1));
  return erased || (replies[0] && replies[0]->type == RedisReply::Type::kInteger && replies[0]->integer > 0);
}

}  // namespace kvlm
