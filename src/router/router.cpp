#include "router/router.h"

#include <map>
#include <set>

#include <fmt/format.h>

#include "common/error.h"
#include "common/log.h"
#include "router/context.h"
#include "router/model_routes.h"
#include "router/monitor.h"
#include "router/passthrough.h"
#include "wire/anthropic/models.h"
#include "wire/http/body_memory.h"
#include "wire/http/front.h"

namespace kvlm::router {

struct Router::Impl {
  Impl(RouterConfig config, std::unique_ptr<PromptReader> prompts) : ctx(std::move(config), std::move(prompts)) {}
  RouterContext ctx;
  RouteTable routes;
  FrontDoor door{load_api_keys(ctx.config.api_keys, ctx.config.api_key_file), ctx.config.metrics_key};
  std::unique_ptr<http::HttpServer> http;  // made once the routes are in place
  int port = -1;
  std::mutex monitors_mu;
  std::map<std::string, std::unique_ptr<WorkerMonitor>> monitors;  // by worker URL
  std::set<std::string> registered;  // members that came from the registry (watcher thread only)
  std::unique_ptr<RegistryWatcher> watcher;

  using Handler = void (*)(RouterContext&, const http::Request&, http::Response&);
  RouteHandler route(Handler h, Access access);
  void add_routes();
};

namespace {

void check_config(const RouterConfig& c, bool have_prompts) {
  if (c.max_attempts < 1) throw_error(ErrorCode::kInvalidArgument, "--max-attempts must be at least 1");
  if (c.health.interval.count() < 1 || c.health.timeout.count() < 1)
    throw_error(ErrorCode::kInvalidArgument, "--health-interval-ms and --health-timeout-ms must be positive");
  if (c.workers.empty() && !c.registry && !c.model_host)
    throw_error(ErrorCode::kInvalidArgument, "no workers: give --workers http://HOST:PORT,... or --registry redis://...");
  if (c.policy == Policy::kKvAware && !have_prompts)
    throw_error(ErrorCode::kInvalidArgument,
                "--policy kv-aware needs -m MODEL (the router reads its tokenizer and chat template, never its "
                "weights); or choose --policy least-load");
  if (c.weights.load_weight < 0 || c.weights.tier_cost < 0 || c.weights.in_flight_cost < 0)
    throw_error(ErrorCode::kInvalidArgument, "the policy weights must not be negative");
}

}  // namespace

RouteHandler Router::Impl::route(Handler h, Access access) {
  return with_access(door, access, [this, h](http::Request& req, http::Response& res) {
    const int64_t body_memory = take_body_memory(ctx.body_memory, ctx.config.retry_after_s,
                                                 ctx.num_rejected_body_memory, req, res);
    if (body_memory == 0 && !req.body.empty()) {
      ctx.metrics.answered(res.status);
      return;
    }
    const BodyMemoryHold hold{ctx.body_memory, body_memory};
    h(ctx, req, res);
    ctx.metrics.answered(res.status);
  });
}

void Router::Impl::add_routes() {
  auto completions = [](RouterContext& c, const http::Request& q, http::Response& r) {
    handle_generation(c, false, q, r);
  };
  auto chat = [](RouterContext& c, const http::Request& q, http::Response& r) { handle_generation(c, true, q, r); };
  routes.post("/v1/completions", route(completions, Access::kMetered));
  routes.post("/v1/chat/completions", route(chat, Access::kMetered));
  // Their streams are copied through, not resumed (router/passthrough.h).
  routes.post("/v1/messages", route(handle_messages_passthrough, Access::kMetered));
  routes.post("/v1/responses", route(handle_responses_passthrough, Access::kMetered));
  routes.post("/infill", route(handle_infill_passthrough, Access::kMetered));
  routes.get(R"(/v1/responses/([A-Za-z0-9_-]+))", route(handle_stored_response, Access::kKey));
  routes.get(R"(/v1/responses/([A-Za-z0-9_-]+)/input_items)", route(handle_stored_response, Access::kKey));
  routes.del(R"(/v1/responses/([A-Za-z0-9_-]+))", route(handle_stored_response, Access::kKey));
  if (ctx.config.model_host) {
    routes.get("/v1/models", route(handle_host_models, Access::kKey));
    routes.get(R"(/v1/models/(.+))", route(handle_host_model, Access::kKey));
    routes.post("/models/load", route(handle_models_load, Access::kKey));
    routes.post("/models/unload", route(handle_models_unload, Access::kKey));
    routes.post("/sleep", route(handle_sleep, Access::kKey));
    routes.post("/wake_up", route(handle_wake_up, Access::kKey));
    routes.get("/is_sleeping", route(handle_is_sleeping, Access::kKey));
  }
  routes.get("/v1/models", route(handle_proxied, Access::kKey));
  routes.get(R"(/v1/models/([^/]+))", route(handle_proxied, Access::kKey));
  // Embeddings are the same on any worker and safe to send again.
  routes.post("/v1/embeddings", route(handle_proxied, Access::kMetered));
  // So are a reranker's scores.
  routes.post("/rerank", route(handle_proxied, Access::kMetered));
  routes.post("/v1/rerank", route(handle_proxied, Access::kMetered));
  routes.post("/v1/score", route(handle_proxied, Access::kMetered));
  routes.post("/tokenize", route(handle_proxied, Access::kKey));
  routes.post("/detokenize", route(handle_proxied, Access::kKey));
  // A prompt rendered and counted is the same on any worker.
  routes.post("/apply-template", route(handle_proxied, Access::kKey));
  routes.post("/v1/messages/count_tokens", route(handle_proxied, Access::kKey));
  routes.get("/props", route(handle_proxied, Access::kKey));
  // One worker's slots, as llama.cpp's clients read them; the slot actions
  // (save, restore, erase) name one worker's slot and are not routed.
  routes.get("/slots", route(handle_proxied, Access::kKey));
  routes.post("/v1/completions/render", route(handle_proxied, Access::kKey));
  routes.post("/v1/chat/completions/render", route(handle_proxied, Access::kKey));
  routes.get("/v1/status", route(handle_status, Access::kStatus));
  routes.get("/health", route(handle_health, Access::kPublic));
  routes.get("/metrics", route(handle_metrics, Access::kMetrics));
  add_web_routes(routes);
}

Router::Router(RouterConfig config, std::unique_ptr<PromptReader> prompts) {
  check_config(config, prompts != nullptr);
  impl_ = std::make_unique<Impl>(std::move(config), std::move(prompts));
  Impl& s = *impl_;
  const RouterConfig& c = s.ctx.config;
  s.ctx.keys = &s.door.keys;
  s.add_routes();
  s.routes.set_cors_origins(c.cors_origins);
  // Anthropic's clients read errors in Anthropic's shape: the router's own
  // too (the key check's 401, no worker's 503, a 404 under /v1/messages), as
  // kvlm serve answers them.
  s.routes.set_shaper(anthropic::shape_error);
  http::ServerLimits limits = c.http;
  limits.retry_after_s = c.retry_after_s;
  s.http = make_http_server(limits, s.routes, c.ssl_cert_file, c.ssl_key_file);
  s.ctx.http_stats = &s.http->stats();
  for (const std::string& url : c.workers) add_worker(url);
  if (c.registry) {
    s.watcher = std::make_unique<RegistryWatcher>(*c.registry, [this](const std::vector<std::string>& urls) {
      sync_registered(urls);
    });
  }
}

void Router::sync_registered(const std::vector<std::string>& urls) {
  Impl& s = *impl_;
  std::set<std::string> now;
  for (const std::string& url : urls) {
    try {
      now.insert(parse_worker_url(url).url);
    } catch (const Error& e) {
      log_warn("router: registry member '{}' ignored: {}", url, e.what());
    }
  }
  for (const std::string& url : now)
    if (s.registered.insert(url).second) add_worker(url);
  std::set<std::string> fixed;  // the static members, which the registry never removes
  for (const std::string& url : s.ctx.config.workers) fixed.insert(parse_worker_url(url).url);
  for (auto it = s.registered.begin(); it != s.registered.end();) {
    if (now.count(*it)) {
      ++it;
      continue;
    }
    if (!fixed.count(*it)) remove_worker(*it);
    it = s.registered.erase(it);
  }
}

Router::~Router() {
  stop();
  impl_->watcher.reset();
  std::lock_guard lock(impl_->monitors_mu);
  impl_->monitors.clear();  // joins their threads
}

void Router::bind() { impl_->port = impl_->http->bind(impl_->ctx.config.host, impl_->ctx.config.port); }

void Router::reload_api_keys() {
  const RouterConfig& c = impl_->ctx.config;
  impl_->door.keys.replace(load_api_keys(c.api_keys, c.api_key_file));
}

int Router::port() const { return impl_->port; }

void Router::run() {
  if (impl_->port < 0) bind();
  impl_->http->run();
}

void Router::stop() { impl_->http->stop(); }

void Router::add_worker(const std::string& url) {
  std::shared_ptr<Worker> w = impl_->ctx.workers.add(url);
  std::lock_guard lock(impl_->monitors_mu);
  auto& monitor = impl_->monitors[w->url()];
  if (!monitor) monitor = std::make_unique<WorkerMonitor>(impl_->ctx, w);
}

void Router::add_worker(const std::string& url, std::set<std::string> models) {
  {
    const std::shared_ptr<Worker> w = impl_->ctx.workers.add(url);
    std::lock_guard lock(impl_->ctx.workers.mu());
    w->models = std::move(models);
  }
  add_worker(url);
}

int32_t Router::requests_in_flight(const std::string& url) const {
  const std::shared_ptr<Worker> w = impl_->ctx.workers.find(parse_worker_url(url).url);
  if (!w) return 0;
  std::lock_guard lock(impl_->ctx.workers.mu());
  return w->num_in_flight;
}

void Router::remove_worker(const std::string& url) {
  const std::string normalized = parse_worker_url(url).url;
  impl_->ctx.workers.remove(normalized);
  std::unique_ptr<WorkerMonitor> gone;
  {
    std::lock_guard lock(impl_->monitors_mu);
    auto it = impl_->monitors.find(normalized);
    if (it == impl_->monitors.end()) return;
    gone = std::move(it->second);
    impl_->monitors.erase(it);
  }
  // Destroyed outside the lock: it joins its threads.
}

std::vector<std::string> Router::worker_urls() const {
  std::vector<std::string> out;
  for (const auto& w : impl_->ctx.workers.all()) out.push_back(w->url());
  return out;
}

}  // namespace kvlm::router
