// Choosing and claiming a worker for one request (context.h).
#include <algorithm>

#include "common/log.h"
#include "kv/block_hash.h"
#include "router/context.h"

namespace kvlm::router {
namespace {

// How long a routed prompt's blocks count as the worker's before its events
// confirm them: longer than a prompt takes to compute under load.
constexpr auto kPendingTtl = std::chrono::seconds(10);

// A request naming a LoRA adapter some worker serves: its blocks are hashed
// with the adapter's key (as the workers hash them), and workers that have
// said they serve other adapters only are skipped (they would answer 404).
void resolve_adapter(PromptInfo& prompt, const std::vector<std::shared_ptr<Worker>>& workers,
                     std::set<std::string>& skip) {
  if (prompt.model.empty()) return;
  std::optional<Hash128> identity;
  for (const auto& w : workers)
    if (w->loras)
      if (const auto it = w->loras->find(prompt.model); it != w->loras->end()) identity = it->second;
  if (!identity) return;
  for (const auto& w : workers)
    if (w->loras && !w->loras->count(prompt.model)) skip.insert(w->url());
  if (prompt.adapter_resolved) return;
  prompt.adapter_resolved = true;
  prompt.salt_key = adapter_extra_key(*identity, prompt.salt_key);
}

}  // namespace

void skip_other_models(const std::string& model, const std::vector<std::shared_ptr<Worker>>& workers,
                       std::set<std::string>& skip) {
  if (model.empty()) return;
  auto serves = [&](const Worker& w) {
    return (w.models && w.models->count(model)) || (w.loras && w.loras->count(model));
  };
  if (std::none_of(workers.begin(), workers.end(), [&](const auto& w) { return serves(*w); })) return;
  for (const auto& w : workers)
    if (w->models && !serves(*w)) skip.insert(w->url());
}

Dispatch::Dispatch(RouterContext& ctx, Decision d) : ctx_(ctx), decision_(std::move(d)) {}

Dispatch::~Dispatch() {
  std::lock_guard lock(ctx_.workers.mu());
  Worker& w = *decision_.worker;
  --w.num_in_flight;
  if (!started_) w.num_outstanding_tokens -= decision_.predicted_uncached;
}

void Dispatch::started() {
  if (started_) return;  // only its request's thread uses a Dispatch: no lock for the check
  std::lock_guard lock(ctx_.workers.mu());
  started_ = true;
  decision_.worker->num_outstanding_tokens -= decision_.predicted_uncached;
}

std::unique_ptr<Dispatch> dispatch(RouterContext& ctx, PromptInfo& prompt, const std::set<std::string>& exclude) {
  std::lock_guard lock(ctx.workers.mu());
  const std::vector<std::shared_ptr<Worker>> workers = ctx.workers.all_locked();
  std::set<std::string> skip = exclude;
  skip_other_models(prompt.model, workers, skip);
  resolve_adapter(prompt, workers, skip);
  std::optional<Decision> d = choose(ctx.config.policy, ctx.config.weights, prompt, workers, skip, ctx.workers,
                                     ctx.round_robin);
  if (!d) return nullptr;
  Worker& w = *d->worker;
  ++w.num_in_flight;
  ++w.num_requests;
  w.num_outstanding_tokens += d->predicted_uncached;
  // Its prompt's blocks are as good as there for the next request (the
  // worker computes them first): kv_index.h, pending blocks.
  if (!prompt.tokens.empty())
    w.kv.add_pending(prompt.chain(w.block_size > 0 ? w.block_size : kDefaultBlockSize), Clock::now(), kPendingTtl);
  ctx.metrics.routed(w.url(), d->reason);
  return std::make_unique<Dispatch>(ctx, std::move(*d));
}

PromptInfo prompt_info(const RouterContext& ctx, bool chat, const Json& body, const http::Request& req) {
  PromptInfo p;
  if (ctx.prompts) {
    PieceIds pieces = ctx.prompts->pieces(chat, body);
    p.tokens = std::move(pieces.ids);
    p.chunks = std::move(pieces.chunks);
    if (!p.chunks.empty()) p.chunk_prefix = ctx.prompts->chunk_prefix();
  }
  if (body.is_object()) {
    if (const auto it = body.find("cache_salt"); it != body.end() && it->is_string())
      p.salt_key = cache_salt_key(it->get_ref<const std::string&>());
    if (const auto it = body.find("user"); it != body.end() && it->is_string()) p.session = it->get<std::string>();
    if (const auto it = body.find("model"); it != body.end() && it->is_string()) p.model = it->get<std::string>();
    if (const auto it = body.find("kv_blend_recompute"); it != body.end() && it->is_number())
      p.blend_recompute = it->get<double>();
  }
  if (const std::string s = req.get_header_value("X-Session-Id"); !s.empty()) p.session = s;
  return p;
}

UpstreamRequest upstream_request(const RouterContext& ctx, const std::string& method, const std::string& target,
                                 std::string body) {
  UpstreamRequest r;
  r.method = method;
  r.target = target;
  r.body = std::move(body);
  if (!r.body.empty() || method == "POST") r.headers.emplace_back("Content-Type", "application/json");
  if (!ctx.config.worker_api_key.empty()) r.headers.emplace_back("Authorization", "Bearer " + ctx.config.worker_api_key);
  return r;
}

UpstreamTimeouts upstream_timeouts(const RouterContext& ctx) {
  UpstreamTimeouts t;
  t.connect = std::min(ctx.config.health.timeout, std::chrono::milliseconds(2000));
  t.head = std::chrono::milliseconds(static_cast<int64_t>(ctx.config.request_timeout_s * 1000));
  return t;
}

void observe_usage(RouterContext& ctx, const Dispatch& d, const Json& usage) {
  if (!d.decision().predicted_cached || !usage.is_object()) return;
  const auto details = usage.find("prompt_tokens_details");
  if (details == usage.end() || !details->is_object()) return;
  const auto cached = details->find("cached_tokens");
  if (cached == details->end() || !cached->is_number_integer()) return;
  ctx.metrics.cached_tokens(*d.decision().predicted_cached, cached->get<int32_t>());
  if (*d.decision().predicted_cached != cached->get<int32_t>())
    log_info("router: predicted {} cached tokens on {}, it reported {} (prompt {}, reason {})",
             *d.decision().predicted_cached, d.worker().url(), cached->get<int32_t>(),
             usage.value("prompt_tokens", 0), d.decision().reason);
}

bool worth_another_worker(int status) { return status == 503 || status == 502 || status == 529; }

}  // namespace kvlm::router
