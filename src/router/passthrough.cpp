#include "router/passthrough.h"

#include <fmt/format.h>

#include "common/error.h"
#include "common/log.h"
#include "router/model_routes.h"
#include "router/sse.h"
#include "router/usage_tally.h"
#include "wire/http/front.h"
#include "wire/openai/json_text.h"

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

// Remembers the worker (and the client's key) of a Response and of each of
// its output items, so that a follow-up naming either reaches it.
void remember_response(RouterContext& ctx, const Json& response, const std::string& worker,
                       const std::string& key_name) {
  if (!response.is_object()) return;
  if (const auto id = response.find("id"); id != response.end() && id->is_string())
    ctx.response_owners.remember(id->get<std::string>(), {worker, key_name});
  const auto output = response.find("output");
  if (output == response.end() || !output->is_array()) return;
  for (const Json& item : *output)
    if (const auto id = item.is_object() ? item.find("id") : item.end(); id != item.end() && id->is_string())
      ctx.response_owners.remember(id->get<std::string>(), {worker, key_name});
}

// A stream being copied from a worker to the client, as the transport's
// Producer: each poll copies what the worker has sent (the transport wakes
// it when the worker's socket is readable); the worker's claim and exchange
// live as long as the client's answer does. Its tokens are read from the
// events as they pass and charged to the client's key at its end.
class RawStream final : public http::Producer {
 public:
  RawStream(RouterContext& ctx, std::unique_ptr<Dispatch> d, std::unique_ptr<UpstreamExchange> x,
            const http::Request& req, bool records_responses)
      : ctx_(ctx), dispatch_(std::move(d)), exchange_(std::move(x)), key_(req.key_ticket),
        key_name_(req.key_name), records_responses_(records_responses), records_items_(records_responses) {}
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
        for (const SseEvent& ev : sse_.feed(more)) {
          usage_.feed_event(ev.data);
          if (records_items_) note_items(ev.data);
        }
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
      ctx_.response_owners.remember(*id, {dispatch_->worker().url(), key_name_});
      records_responses_ = false;
    } else if (head_.size() > 16384) {
      records_responses_ = false;  // not a Response stream as expected: stop looking
    }
    if (!records_responses_) head_.clear();
  }

  // The final event holds the whole Response: its items' ids. (Quoted: a
  // text delta holding these words has its quotes escaped.)
  void note_items(const std::string& data) {
    if (data.find("\"response.completed\"") == std::string::npos &&
        data.find("\"response.incomplete\"") == std::string::npos)
      return;
    const Json event = openai::parse_json_or_discarded(data);
    if (event.is_object() && event.contains("response"))
      remember_response(ctx_, event["response"], dispatch_->worker().url(), key_name_);
    records_items_ = false;
  }

  RouterContext& ctx_;
  std::unique_ptr<Dispatch> dispatch_;
  std::unique_ptr<UpstreamExchange> exchange_;
  std::shared_ptr<KeyTicket> key_;
  std::string key_name_;  // the client's key, whose the Response is
  std::shared_ptr<http::Waker> waker_;
  bool records_responses_ = false;  // until the Response's id has been seen
  bool records_items_ = false;      // until the final event has been seen
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
             std::make_unique<RawStream>(ctx, std::move(d), std::move(x), req, records_responses));
}

// The owner of a stored Response, if the router knows it and it can take
// the request: every other worker is excluded from the choice.
std::unique_ptr<Dispatch> dispatch_to_owner(RouterContext& ctx, PromptInfo& prompt, const std::string& response_id) {
  if (response_id.empty()) return nullptr;
  const std::optional<ResponseOwners::Owner> owner = ctx.response_owners.owner(response_id);
  if (!owner) return nullptr;
  std::set<std::string> others;
  for (const auto& w : ctx.workers.all())
    if (w->url() != owner->worker_url) others.insert(w->url());
  return dispatch(ctx, prompt, others);
}

}  // namespace

void handle_passthrough(RouterContext& ctx, const http::Request& req, http::Response& res,
                        const PassthroughOptions& options) {
  const auto arrived = Clock::now();
  PromptInfo prompt;
  if (options.prompt_view) prompt = prompt_info(ctx, true, *options.prompt_view, req);
  if (prompt.model.empty()) prompt.model = request_model(req);
  ModelHost::Lease lease;
  if (!lease_model(ctx, prompt.model, lease, res)) return;
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
        remember_response(ctx, openai::parse_json_or_discarded(*body), w.url(), req.key_name);
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

void handle_infill_passthrough(RouterContext& ctx, const http::Request& req, http::Response& res) {
  handle_passthrough(ctx, req, res, {});
}

void handle_messages_passthrough(RouterContext& ctx, const http::Request& req, http::Response& res) {
  const Json body = openai::parse_json_or_discarded(req.body);
  const Json view = messages_as_chat(body);
  handle_passthrough(ctx, req, res, {.prompt_view = body.is_discarded() ? nullptr : &view});
}

namespace {

// Whether the router knows the Response or item `id` as another key's: the
// client is answered as if there were none (the worker cannot tell the
// router's clients apart: it sees the router's key).
bool foreign(const RouterContext& ctx, const http::Request& req, const std::string& id) {
  const std::optional<ResponseOwners::Owner> owner = ctx.response_owners.owner(id);
  return owner && !owner->key_name.empty() && owner->key_name != req.key_name;
}

// The 404 a worker answers for an id it does not hold (routes_responses.cpp).
void send_not_found(http::Response& res, const char* what, const std::string& id, std::string param) {
  openai::RequestError e{404, fmt::format("{} with id '{}' not found.", what, id), std::move(param)};
  e.code = "not_found";
  send_error(res, e);
}

}  // namespace

void handle_responses_passthrough(RouterContext& ctx, const http::Request& req, http::Response& res) {
  const Json body = openai::parse_json_or_discarded(req.body);
  PassthroughOptions o{.records_responses = true};
  if (body.is_object()) {
    if (const auto it = body.find("previous_response_id"); it != body.end() && it->is_string()) {
      o.owner_of = it->get<std::string>();
      if (foreign(ctx, req, o.owner_of)) return send_not_found(res, "Response", o.owner_of, "previous_response_id");
    }
    // Item references (the AI SDK's earlier turns): the first one's worker
    // holds the conversation, when no previous_response_id says which.
    const auto input = body.find("input");
    for (size_t i = 0; input != body.end() && input->is_array() && i < input->size(); ++i) {
      const Json& item = (*input)[i];
      if (!item.is_object() || item.value("type", "") != "item_reference" || !item.contains("id") ||
          !item["id"].is_string())
        continue;
      const std::string id = item["id"];
      if (foreign(ctx, req, id)) return send_not_found(res, "Item", id, fmt::format("input[{}].id", i));
      if (o.owner_of.empty()) o.owner_of = id;
    }
  }
  handle_passthrough(ctx, req, res, o);
}

void handle_stored_response(RouterContext& ctx, const http::Request& req, http::Response& res) {
  const std::string id = req.matches.size() > 1 ? req.matches[1] : std::string();
  if (foreign(ctx, req, id)) return send_not_found(res, "Response", id, "response_id");
  handle_passthrough(ctx, req, res, {.owner_of = id});
}

}  // namespace kvlm::router
