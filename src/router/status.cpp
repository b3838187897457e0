// The router's own answers: /v1/status (the workers and their load, in the
// fields the chat page reads from a single server plus a `workers` list),
// /health and /metrics.
#include "common/error.h"
#include "common/log.h"
#include "router/context.h"
#include "router/metrics_merge.h"
#include "router/model_routes.h"
#include "wire/openai/json_text.h"

namespace kvlm::router {
namespace {

// The LoRA adapters a worker serves, by name (null until it has said).
Json loras_json(const Worker& w) {
  if (!w.loras) return nullptr;
  Json names = Json::array();
  for (const auto& [name, identity] : *w.loras) names.push_back(name);
  return names;
}

Json worker_json(const Worker& w) {
  return Json{{"url", w.url()},
              {"state", worker_state_name(w.state)},
              {"reason", w.down_reason},
              {"requests_running", w.load.num_running},
              {"requests_waiting", w.load.num_waiting},
              {"pending_tokens", w.load.num_pending_tokens},
              {"kv_blocks_free", w.load.num_kv_blocks_free},
              {"kv_blocks_total", w.load.num_kv_blocks_total},
              {"kv_events", w.kv_events_live},
              {"kv_blocks_indexed", w.kv.size()},
              {"shared_tier", w.shared_tier ? Json(*w.shared_tier) : Json(nullptr)},
              {"loras", loras_json(w)},
              {"models", w.models ? Json(*w.models) : Json(nullptr)},
              {"requests_in_flight", w.num_in_flight},
              {"requests_sent", w.num_requests}};
}

// Sums of a numeric field over the workers' last /v1/status.
int64_t sum_status(const std::vector<std::shared_ptr<Worker>>& ws, const char* key) {
  int64_t n = 0;
  for (const auto& w : ws)
    if (w->status.is_object() && w->status.contains(key) && w->status[key].is_number()) n += w->status[key].get<int64_t>();
  return n;
}

}  // namespace

void handle_status(RouterContext& ctx, const http::Request&, http::Response& res) {
  Json body;
  {
    std::lock_guard lock(ctx.workers.mu());
    const auto ws = ctx.workers.all_locked();
    Json workers = Json::array();
    Json model_info = Json::object();
    for (const auto& w : ws) {
      workers.push_back(worker_json(*w));
      if (model_info.empty() && w->state != WorkerState::kDown && w->status.is_object()) model_info = w->status;
    }
    const int64_t queried = sum_status(ws, "prefix_cache_query_tokens"), hit = sum_status(ws, "prefix_cache_hit_tokens");
    body = {{"router", true},
            {"policy", policy_name(ctx.config.policy)},
            {"model", model_info.value("model", "")},
            {"max_model_len", model_info.value("max_model_len", 0)},
            {"chat_template", model_info.value("chat_template", false)},
            {"draining", false},
            {"requests_running", sum_status(ws, "requests_running")},
            {"requests_waiting", sum_status(ws, "requests_waiting")},
            {"requests_finished", sum_status(ws, "requests_finished")},
            {"kv_blocks_used", sum_status(ws, "kv_blocks_used")},
            {"kv_blocks_total", sum_status(ws, "kv_blocks_total")},
            {"kv_block_size", model_info.value("kv_block_size", 0)},
            {"prefix_cache_query_tokens", queried},
            {"prefix_cache_hit_tokens", hit},
            {"prefix_cache_hit_rate", queried > 0 ? static_cast<double>(hit) / static_cast<double>(queried) : 0.0},
            {"prompt_tokens_total", sum_status(ws, "prompt_tokens_total")},
            {"generation_tokens_total", sum_status(ws, "generation_tokens_total")},
            {"workers", workers}};
  }
  const RouterMetrics::Predictions p = ctx.metrics.predictions();
  body["predicted_cached_tokens"] = p.predicted_tokens;
  body["reported_cached_tokens"] = p.reported_tokens;
  body["cache_predictions_exact"] = p.num_exact;
  body["cache_predictions"] = p.num_exact + p.num_over + p.num_under;
  body["resumed_streams"] = ctx.metrics.num_resumed_streams();
  body["retries"] = ctx.metrics.num_retries();
  res.set_header("Cache-Control", "no-store");
  res.set_content(openai::dump_json(body), "application/json");
}

// 200 while some worker takes requests, so a load balancer in front of
// several routers sends elsewhere when this one has none.
void handle_health(RouterContext& ctx, const http::Request&, http::Response& res) {
  int32_t num_up = 0, num_workers = 0;
  {
    std::lock_guard lock(ctx.workers.mu());
    const auto now = Clock::now();
    for (const auto& w : ctx.workers.all_locked()) {
      ++num_workers;
      if (ctx.workers.routable(*w, now)) ++num_up;
    }
  }
  // A model host starts its models on demand: none loaded is no fault.
  if (num_up == 0 && !ctx.config.model_host) res.status = 503;
  res.set_content(openai::dump_json(Json{{"status", res.status == 200 ? "ok" : "no_worker"},
                                         {"workers_up", num_up},
                                         {"workers", num_workers}}),
                  "application/json");
}

namespace {

// Each loaded model worker's own /metrics, its samples labelled with its
// model (a worker that does not answer in time is left out of this scrape).
std::vector<MetricsSource> model_worker_metrics(RouterContext& ctx) {
  std::vector<MetricsSource> out;
  UpstreamTimeouts t;
  t.connect = t.send = t.head = std::chrono::milliseconds(2000);
  for (const std::shared_ptr<Worker>& w : ctx.workers.all()) {
    std::string model;
    {
      std::lock_guard lock(ctx.workers.mu());
      if (!w->models || w->models->size() != 1) continue;
      model = *w->models->begin();
    }
    try {
      UpstreamExchange x(w->link, upstream_request(ctx, "GET", "/metrics", ""), t);
      std::string text = x.read_all(t.head);
      if (x.status() == 200) out.push_back({std::move(text), "model_name", prometheus_label_value(model)});
    } catch (const Error& e) {
      log_debug("router: /metrics of {}: {}", w->url(), e.what());
    }
  }
  return out;
}

}  // namespace

void handle_metrics(RouterContext& ctx, const http::Request&, http::Response& res) {
  std::string own = ctx.metrics.prometheus_text(ctx.workers) + (ctx.keys ? ctx.keys->metrics_text() : std::string()) +
                    (ctx.http_stats ? http::stats_metrics_text(*ctx.http_stats) : std::string());
  if (ModelHost* host = ctx.config.model_host) {
    std::vector<MetricsSource> sources = {{own + host_metrics_text(*host), "", ""}};
    for (MetricsSource& s : model_worker_metrics(ctx)) sources.push_back(std::move(s));
    own = merge_metrics_texts(sources);
  }
  res.set_content(std::move(own), "text/plain; version=0.0.4");
}

}  // namespace kvlm::router
