#include "router/passthrough.h"

#include <fmt/format.h>

#include "common/error.h"
#include "common/log.h"
#include "router/sse.h"
#include "router/usage_tally.h"
#include "server/http/front.h"
#include "server/openai/json_text.h"

namespace kvlm::router {
namespace {

using Ms = std::chrono::milliseconds;

// The first "id":"resp_..." in a Response's JSON or its stream's first event.
std::optional<std::string> response_id_in(std::string_view text) {
  constexpr std::string_view kKey = "\"id\":\"resp";
  const size_t at = text.find(kKey);
  if (at == std::string_view::npos) return std::nullopt;
  const size_t start = at + 6, end = text.find('"', start);
  if (end == std::string_view::npos) return std::nullopt;
  return std::string(text.substr(start, end - start));
}

// A stream being copied from a worker to the client, as the transport's
// Producer: each poll copies what the worker has sent (the transport wakes
// it when the worker's socket is readable); the worker's claim and exchange
// live as long as the client's answer does. Its tokens are read from the
// events as they pass and charged to the client's key at its end.
class RawStream final : public http::Producer {
 public:
  RawStream(RouterContext& ctx, std::unique_ptr<Dispatch> d, std::unique_ptr<UpstreamExchange> x,
            std::shared_ptr<KeyTicket> key, bool records_responses)
      : ctx_(ctx), dispatch_(std::move(d)), exchange_(std::move(x)), key_(std::move(key)),
        records_responses_(records_responses) {}
  void start(std::shared_ptr<http::Waker> waker) override { waker_ = std::move(waker); }
  void cancel() override {
    exchange_.reset();  // dropping the exchange cancels the worker's request
    dispatch_.reset();
  }

  Progress poll(http::Response& res, Clock::time_point& wake_at) override {
    if (copy(res.body)) {
      if (key_) key_->charge_tokens(usage_.total());
      return Progress::kDone;
    }
    waker_->wake_when_readable(exchange_->fd());
    wake_at = last_byte_ + ctx_.config.stream_idle_timeout;
    return Progress::kPending;
  }

 private:
  // Copies what the worker has sent; true when the stream has ended (or broke).
  bool copy(std::string& out) {
    try {
      for (;;) {
        const size_t before = out.size();
        const auto r = exchange_->read_body(out, Ms(0));
        if (r == UpstreamExchange::Read::kEnd) {
          ctx_.workers.report_success(dispatch_->worker());
          return true;
        }
        if (r == UpstreamExchange::Read::kIdle) {
          if (Clock::now() - last_byte_ >= ctx_.config.stream_idle_timeout)
            throw_error(ErrorCode::kUnavailable, "no byte for {} ms", ctx_.config.stream_idle_timeout.count());
          return false;
        }
        last_byte_ = Clock::now();
        const std::string_view more(out.data() + before, out.size() - before);
        for (const SseEvent& ev : sse_.feed(more)) usage_.feed_event(ev.data);
        if (records_responses_) note_response_id(more);
      }
    } catch (const Error& e) {
      // The worker died or froze mid-stream: the stream ends where it broke.
      ctx_.workers.report_failure(dispatch_->worker(), e.what());
      log_warn("router: a pass-through stream from {} broke: {}", dispatch_->worker().url(), e.what());
      return true;
    }
  }

  // response.created comes first and names the Response.
  void note_response_id(std::string_view more) {
    head_ += more;
    if (std::optional<std::string> id = response_id_in(head_)) {
      ctx_.response_owners.remember(*id, dispatch_->worker().url());
      records_responses_ = false;
    } else if (head_.size() > 16384) {
      records_responses_ = false;  // not a Response stream as expected: stop looking
    }
    if (!records_responses_) head_.clear();
  }

  RouterContext& ctx_;
  std::unique_ptr<Dispatch> dispatch_;
  std::unique_ptr<UpstreamExchange> exchange_;
  std::shared_ptr<KeyTicket> key_;
  std::shared_ptr<http::Waker> waker_;
  bool records_responses_ = false;  // until the Response's id has been seen
  std::string head_;                // the stream's first bytes, while looking for it
  SseReader sse_;
  UsageTally usage_;
  Clock::time_point last_byte_ = Clock::now();
};

void relay_raw_stream(RouterContext& ctx, std::unique_ptr<Dispatch> d, std::unique_ptr<UpstreamExchange> x,
                      const http::Request& req, http::Response& res, bool records_responses) {
  res.status = x->status();
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  d->started();
  res.stream("text/event-stream",
             std::make_unique<RawStream>(ctx, std::move(d), std::move(x), req.key_ticket, records_responses));
}

// The owner of a stored Response, if the router knows it and it can take
// the request: every other worker is excluded from the choice.
std::unique_ptr<Dispatch> dispatch_to_owner(RouterContext& ctx, PromptInfo& prompt, const std::string& response_id) {
  if (response_id.empty()) return nullptr;
  const std::optional<std::string> owner = ctx.response_owners.owner(response_id);
  if (!owner) return nullptr;
  std::set<std::string> others;
  for (const auto& w : ctx.workers.all())
    if (w->url() != *owner) others.insert(w->url());
  return dispatch(ctx, prompt, others);
}

}  // namespace

void handle_passthrough(RouterContext& ctx, const http::Request& req, http::Response& res,
                        const PassthroughOptions& options) {
  const auto arrived = Clock::now();
  PromptInfo prompt;
  if (options.prompt_view) prompt = prompt_info(ctx, true, *options.prompt_view, req);
  std::set<std::string> tried;
  std::string last_error;
  for (int32_t attempt = 0; attempt < ctx.config.max_attempts; ++attempt) {
    std::unique_ptr<Dispatch> d = attempt == 0 ? dispatch_to_owner(ctx, prompt, options.owner_of) : nullptr;
    if (!d) d = dispatch(ctx, prompt, tried);
    if (!d) break;
    if (attempt > 0) ctx.metrics.retried();
    Worker& w = d->worker();
    try {
      auto x = std::make_unique<UpstreamExchange>(w.link, upstream_request(ctx, req.method, req.target, req.body),
                                                  upstream_timeouts(ctx));
      ctx.metrics.added_latency(std::chrono::duration<double>(x->sent_at() - arrived).count());
      if (x->status() == 200 && x->header("Content-Type").starts_with("text/event-stream"))
        return relay_raw_stream(ctx, std::move(d), std::move(x), req, res, options.records_responses);
      std::optional<std::string> body = read_whole(ctx, *x, req);
      if (!body) return;  // the client is gone
      ctx.workers.report_success(w);
      if (worth_another_worker(x->status()) && attempt + 1 < ctx.config.max_attempts) {
        last_error = fmt::format("{} answered {}", w.url(), x->status());
        tried.insert(w.url());
        continue;
      }
      d->started();
      if (options.records_responses && x->status() == 200)
        if (std::optional<std::string> id = response_id_in(*body)) ctx.response_owners.remember(*id, w.url());
      if (x->status() == 200) charge_tokens(req, body_usage_total(*body));  // the client key's tokens per minute
      return pass_through(*x, std::move(*body), res);
    } catch (const Error& e) {
      ctx.workers.report_failure(w, e.what());
      last_error = e.what();
      tried.insert(w.url());
    }
  }
  refuse_no_worker(ctx, res, last_error);
}

namespace {

// An Anthropic content (a string, or blocks of which the text ones count)
// as a chat message's content string.
std::string anthropic_text(const Json& content) {
  if (content.is_string()) return content.get<std::string>();
  std::string out;
  if (content.is_array())
    for (const Json& block : content)
      if (block.is_object() && block.value("type", "") == "text" && block.contains("text") && block["text"].is_string())
        out += block["text"].get<std::string>();
  return out;
}

// A Messages request as the chat request whose prompt the worker renders
// (system first, then the turns), for the prompt reader; close enough for
// text conversations, which is where a prefix is worth routing by.
Json messages_as_chat(const Json& body) {
  Json chat = {{"messages", Json::array()}};
  if (!body.is_object()) return chat;
  if (const auto it = body.find("system"); it != body.end() && !it->is_null())
    chat["messages"].push_back({{"role", "system"}, {"content", anthropic_text(*it)}});
  if (const auto it = body.find("messages"); it != body.end() && it->is_array())
    for (const Json& m : *it)
      if (m.is_object() && m.contains("role") && m["role"].is_string())
        chat["messages"].push_back({{"role", m["role"]}, {"content", anthropic_text(m.value("content", Json("")))}});
  for (const char* key : {"user", "cache_salt"})
    if (body.contains(key)) chat[key] = body[key];
  return chat;
}

}  // namespace

void handle_messages_passthrough(RouterContext& ctx, const http::Request& req, http::Response& res) {
  const Json body = openai::parse_json_or_discarded(req.body);
  const Json view = messages_as_chat(body);
  handle_passthrough(ctx, req, res, {.prompt_view = body.is_discarded() ? nullptr : &view});
}

void handle_responses_passthrough(RouterContext& ctx, const http::Request& req, http::Response& res) {
  const Json body = openai::parse_json_or_discarded(req.body);
  PassthroughOptions o{.records_responses = true};
  if (body.is_object())
    if (const auto it = body.find("previous_response_id"); it != body.end() && it->is_string())
      o.owner_of = it->get<std::string>();
  handle_passthrough(ctx, req, res, o);
}

void handle_stored_response(RouterContext& ctx, const http::Request& req, http::Response& res) {
  handle_passthrough(ctx, req, res, {.owner_of = req.matches.size() > 1 ? req.matches[1] : std::string()});
}

}  // namespace kvlm::router
