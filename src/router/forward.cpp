// Generation requests into the fleet: the worker a policy chooses gets the
// request; a worker that fails before answering (refused, reset, frozen,
// draining) is replaced by another, up to max_attempts. An answer whole is
// passed through as the worker wrote it; a stream is handed to relay.cpp.
#include <random>

#include <fmt/format.h>

#include "common/error.h"
#include "common/log.h"
#include "router/context.h"
#include "router/model_routes.h"
#include "router/usage_tally.h"
#include "wire/http/front.h"
#include "wire/openai/json_text.h"

namespace kvlm::router {

using Ms = std::chrono::milliseconds;

namespace {
constexpr Ms kHangUpCheck{100};
}  // namespace

void refuse_no_worker(RouterContext& ctx, http::Response& res, const std::string& why) {
  ctx.metrics.no_worker();
  send_overloaded(res, ctx.config.retry_after_s,
                  why.empty() ? std::string("no worker can take the request now; retry later")
                              : fmt::format("no worker could take the request ({}); retry later", why),
                  "no_worker_available");
}

// Copies a worker's answer (status, body, the headers a client uses).
void pass_through(const UpstreamExchange& x, std::string body, http::Response& res) {
  res.status = x.status();
  if (const std::string ra = x.header("Retry-After"); !ra.empty()) res.set_header("Retry-After", ra);
  const std::string type = x.header("Content-Type");
  res.set_content(std::move(body), type.empty() ? "application/json" : type);
}

// Reads a whole answer, watching the client: one that hangs up gets the
// worker's request cancelled (closing our connection to it does that).
std::optional<std::string> read_whole(RouterContext& ctx, UpstreamExchange& x, const http::Request& req) {
  const auto deadline = Clock::now() + Ms(static_cast<int64_t>(ctx.config.request_timeout_s * 1000));
  std::string body;
  for (;;) {
    const auto r = x.read_body(body, kHangUpCheck);
    if (r == UpstreamExchange::Read::kEnd) return body;
    if (r == UpstreamExchange::Read::kData) continue;
    if (req.client_gone()) return std::nullopt;
    if (Clock::now() > deadline)
      throw_error(ErrorCode::kUnavailable, "no answer within --request-timeout ({} s)", ctx.config.request_timeout_s);
  }
}

namespace {

void forward_whole(RouterContext& ctx, const std::string& path, const http::Request& req, http::Response& res,
                   PromptInfo& prompt, Clock::time_point arrived) {
  std::set<std::string> tried;
  std::string last_error;
  for (int32_t attempt = 0; attempt < ctx.config.max_attempts; ++attempt) {
    std::unique_ptr<Dispatch> d = dispatch(ctx, prompt, tried);
    if (!d) break;
    if (attempt > 0) ctx.metrics.retried();
    Worker& w = d->worker();
    try {
      UpstreamExchange x(w.link, upstream_request(ctx, "POST", path, req.body), upstream_timeouts(ctx));
      ctx.metrics.added_latency(std::chrono::duration<double>(x.sent_at() - arrived).count());
      std::optional<std::string> body = read_whole(ctx, x, req);
      if (!body) return;  // the client is gone; closing the exchange cancels the request
      ctx.workers.report_success(w);
      if (worth_another_worker(x.status()) && attempt + 1 < ctx.config.max_attempts) {
        last_error = fmt::format("{} answered {}", w.url(), x.status());
        tried.insert(w.url());
        continue;
      }
      d->started();
      if (x.status() == 200) {
        const Json answer = Json::parse(*body, nullptr, false);
        if (answer.is_object() && answer.contains("usage")) {
          observe_usage(ctx, *d, answer["usage"]);
          charge_tokens(req, usage_total(answer["usage"]));  // the client key's tokens per minute
        }
      }
      return pass_through(x, std::move(*body), res);
    } catch (const Error& e) {
      ctx.workers.report_failure(w, e.what());
      last_error = e.what();
      tried.insert(w.url());
    }
  }
  refuse_no_worker(ctx, res, last_error);
}

// The body a stream's first worker gets: token ids on every event and a
// usage chunk at the end (the router strips what the client did not ask
// for), and a seed, so that a stream resumed elsewhere keeps sampling the
// same random stream (docs/router.md "Streams that survive a worker").
std::string stream_body(Json& body, uint64_t& seed) {
  Json up = body;
  up["return_token_ids"] = true;
  Json options = up.contains("stream_options") && up["stream_options"].is_object() ? up["stream_options"] : Json::object();
  options["include_usage"] = true;
  up["stream_options"] = options;
  if (const auto it = body.find("seed"); it != body.end() && it->is_number_integer()) {
    seed = it->get<uint64_t>();
  } else if (it == body.end() || it->is_null()) {
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    seed = rng() >> 1;  // a non-negative int64, as the worker reads it
    up["seed"] = seed;
  }
  return openai::dump_json(up);
}

void start_stream(RouterContext& ctx, bool chat, const std::string& path, Json body, PromptInfo prompt,
                  const http::Request& req, http::Response& res, Clock::time_point arrived) {
  StreamStart s;
  s.key = req.key_ticket;
  const std::string up_body = stream_body(body, s.seed);
  std::string last_error;
  for (int32_t attempt = 0; attempt < ctx.config.max_attempts; ++attempt) {
    s.dispatch = dispatch(ctx, prompt, s.tried);
    if (!s.dispatch) break;
    if (attempt > 0) ctx.metrics.retried();
    Worker& w = s.dispatch->worker();
    try {
      auto x = std::make_unique<UpstreamExchange>(w.link, upstream_request(ctx, "POST", path, up_body),
                                                  upstream_timeouts(ctx));
      ctx.metrics.added_latency(std::chrono::duration<double>(x->sent_at() - arrived).count());
      if (x->status() == 200) {
        s.body = std::move(body);
        s.chat = chat;
        s.path = path;
        s.prompt = std::move(prompt);
        s.exchange = std::move(x);
        return relay_stream(ctx, std::move(s), res);
      }
      std::string answer = x->read_all(ctx.config.stream_idle_timeout);
      ctx.workers.report_success(w);
      if (worth_another_worker(x->status()) && attempt + 1 < ctx.config.max_attempts) {
        last_error = fmt::format("{} answered {}", w.url(), x->status());
        s.tried.insert(w.url());
        continue;
      }
      return pass_through(*x, std::move(answer), res);  // the worker's refusal (400, 404, ...)
    } catch (const Error& e) {
      ctx.workers.report_failure(w, e.what());
      last_error = e.what();
      s.tried.insert(w.url());
    }
  }
  refuse_no_worker(ctx, res, last_error);
}

}  // namespace

void handle_generation(RouterContext& ctx, bool chat, const http::Request& req, http::Response& res) {
  const auto arrived = Clock::now();
  std::optional<Json> body = parse_body(req, res);
  if (!body) return;
  PromptInfo prompt = prompt_info(ctx, chat, *body, req);
  ModelHost::Lease lease;
  if (!lease_model(ctx, prompt.model, lease, res)) return;
  const std::string path = chat ? "/v1/chat/completions" : "/v1/completions";
  bool stream = false;
  if (body->is_object())
    if (const auto it = body->find("stream"); it != body->end() && it->is_boolean()) stream = it->get<bool>();
  if (stream) return start_stream(ctx, chat, path, std::move(*body), std::move(prompt), req, res, arrived);
  forward_whole(ctx, path, req, res, prompt, arrived);
}

std::string request_model(const http::Request& req) {
  if (req.method == "GET") {
    static const std::string prefix = "/v1/models/";
    return req.path.starts_with(prefix) ? req.path.substr(prefix.size()) : std::string();
  }
  const Json body = Json::parse(req.body, nullptr, false);
  if (!body.is_object()) return {};
  const auto it = body.find("model");
  return it != body.end() && it->is_string() ? it->get<std::string>() : std::string();
}

void handle_proxied(RouterContext& ctx, const http::Request& req, http::Response& res) {
  PromptInfo none;
  std::set<std::string> tried;
  std::string last_error;
  // The query too: Anthropic's model list pages by it.
  const std::string target = req.query.empty() ? req.path : req.path + "?" + req.query;
  std::string model = request_model(req);
  ModelHost::Lease lease;
  if (!lease_model(ctx, model, lease, res)) return;
  for (int32_t attempt = 0; attempt < ctx.config.max_attempts; ++attempt) {
    std::unique_ptr<Dispatch> d;
    {
      // Any worker that is up and serves the model named: these answers do
      // not depend on which.
      std::lock_guard lock(ctx.workers.mu());
      const std::vector<std::shared_ptr<Worker>> workers = ctx.workers.all_locked();
      std::set<std::string> skip = tried;
      skip_other_models(model, workers, skip);
      auto decision =
          choose(Policy::kRoundRobin, ctx.config.weights, none, workers, skip, ctx.workers, ctx.round_robin);
      if (!decision) break;
      d = std::make_unique<Dispatch>(ctx, std::move(*decision));
      ++d->worker().num_in_flight;
    }
    Worker& w = d->worker();
    try {
      UpstreamRequest up = upstream_request(ctx, req.method, target, req.method == "POST" ? req.body : "");
      // An Anthropic client's model list is Anthropic's (anthropic/models.h).
      if (const std::string* v = http::find_header(req.headers, "anthropic-version"))
        up.headers.emplace_back("anthropic-version", *v);
      UpstreamExchange x(w.link, std::move(up), upstream_timeouts(ctx));
      std::string body = x.read_all(Ms(static_cast<int64_t>(ctx.config.request_timeout_s * 1000)));
      ctx.workers.report_success(w);
      if (x.status() == 200) charge_tokens(req, body_usage_total(body));  // embeddings: the client key's tokens
      return pass_through(x, std::move(body), res);
    } catch (const Error& e) {
      ctx.workers.report_failure(w, e.what());
      last_error = e.what();
      tried.insert(w.url());
    }
  }
  refuse_no_worker(ctx, res, last_error);
}

}  // namespace kvlm::router
