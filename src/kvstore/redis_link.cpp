#include "kvstore/redis_link.h"

#include <algorithm>
#include <cmath>

#include <hiredis/hiredis.h>
#include <sys/time.h>

namespace kvlm {
namespace {

timeval to_timeval(double seconds) {
  timeval tv;
  tv.tv_sec = static_cast<time_t>(seconds);
  tv.tv_usec = static_cast<suseconds_t>((seconds - static_cast<double>(tv.tv_sec)) * 1e6);
  return tv;
}

RedisReply copy_reply(const redisReply* r) {
  RedisReply out;
  switch (r->type) {
    case REDIS_REPLY_STRING: out.type = RedisReply::Type::kString; break;
    case REDIS_REPLY_STATUS: out.type = RedisReply::Type::kStatus; break;
    case REDIS_REPLY_ERROR: out.type = RedisReply::Type::kError; break;
    case REDIS_REPLY_INTEGER: out.type = RedisReply::Type::kInteger; break;
    case REDIS_REPLY_ARRAY: out.type = RedisReply::Type::kArray; break;
    default: out.type = RedisReply::Type::kNil; break;
  }
  if (r->str != nullptr && r->len > 0) out.str.assign(r->str, r->len);
  out.integer = r->integer;
  if (r->type == REDIS_REPLY_ARRAY) {
    out.elements.reserve(r->elements);
    for (size_t i = 0; i < r->elements; ++i) out.elements.push_back(copy_reply(r->element[i]));
  }
  return out;
}

bool append(redisContext* c, const RedisCommand& cmd) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const auto& a : cmd) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  return redisAppendCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data()) == REDIS_OK;
}

}  // namespace

RedisLink::RedisLink(RedisEndpoint endpoint, RedisLinkOptions options, const Clock& clock)
    : endpoint_(std::move(endpoint)), options_(std::move(options)), clock_(clock) {}

RedisLink::~RedisLink() {
  if (ctx_ != nullptr) redisFree(ctx_);
}

void RedisLink::fail(std::string why) {
  if (ctx_ != nullptr) {
    redisFree(ctx_);
    ctx_ = nullptr;
  }
  ++num_failures_;
  const double backoff =
      std::min(options_.backoff_max_s, options_.backoff_min_s * std::pow(2.0, std::min(num_failures_ - 1, 30)));
  retry_at_s_ = clock_.now_s() + backoff;
  last_error_ = std::move(why);
}

bool RedisLink::connect() {
  ctx_ = redisConnectWithTimeout(endpoint_.host.c_str(), endpoint_.port, to_timeval(options_.connect_timeout_s));
  if (ctx_ == nullptr || ctx_->err != 0) {
    fail("connect " + endpoint_.to_string() + ": " + (ctx_ ? ctx_->errstr : "out of memory"));
    return false;
  }
  if (redisSetTimeout(ctx_, to_timeval(options_.command_timeout_s)) != REDIS_OK) {
    fail("set timeout: " + std::string(ctx_->errstr));
    return false;
  }
  std::vector<RedisCommand> hello;
  if (!options_.password.empty()) hello.push_back({"AUTH", options_.password});
  if (options_.db != 0) hello.push_back({"SELECT", std::to_string(options_.db)});
  if (hello.empty()) return true;
  for (const auto& c : hello) append(ctx_, c);
  for (size_t i = 0; i < hello.size(); ++i) {
    void* raw = nullptr;
    if (redisGetReply(ctx_, &raw) != REDIS_OK || raw == nullptr) {
      fail("handshake: " + std::string(ctx_->errstr));
      return false;
    }
    RedisReply r = copy_reply(static_cast<redisReply*>(raw));
    freeReplyObject(raw);
    if (r.is_error()) {
      fail(hello[i][0] + ": " + r.str);
      return false;
    }
  }
  return true;
}

bool RedisLink::send(std::span<const RedisCommand> commands) {
  num_pending_ = 0;
  if (num_failures_ > 0 && clock_.now_s() < retry_at_s_) return false;  // breaker open
  if (ctx_ == nullptr && !connect()) return false;
  for (const auto& c : commands) {
    if (!append(ctx_, c)) {
      fail("append: " + std::string(ctx_->errstr));
      return false;
    }
  }
  // Write it all now, so the server works while we send to other nodes.
  int done = 0;
  while (!done) {
    if (redisBufferWrite(ctx_, &done) != REDIS_OK) {
      fail(endpoint_.to_string() + ": " + std::string(ctx_->errstr));
      return false;
    }
  }
  num_pending_ = commands.size();
  return true;
}

std::optional<std::vector<RedisReply>> RedisLink::receive() {
  if (ctx_ == nullptr) return std::nullopt;
  std::vector<RedisReply> replies;
  replies.reserve(num_pending_);
  for (size_t i = 0; i < num_pending_; ++i) {
    void* raw = nullptr;
    if (redisGetReply(ctx_, &raw) != REDIS_OK || raw == nullptr) {
      // I/O error or timeout: the stream is out of step, so the connection
      // cannot be reused.
      fail(endpoint_.to_string() + ": " + (ctx_->err != 0 ? std::string(ctx_->errstr) : "no reply"));
      num_pending_ = 0;
      return std::nullopt;
    }
    replies.push_back(copy_reply(static_cast<redisReply*>(raw)));
    freeReplyObject(raw);
  }
  num_pending_ = 0;
  num_failures_ = 0;
  last_error_.clear();
  return replies;
}

std::optional<std::vector<RedisReply>> RedisLink::pipeline(std::span<const RedisCommand> commands) {
  if (commands.empty()) return std::vector<RedisReply>{};
  if (!send(commands)) return std::nullopt;
  return receive();
}

}  // namespace kvlm
