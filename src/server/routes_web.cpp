// The chat page (GET /, its script and style, embedded in the binary) and
// GET /v1/status, the JSON the page's live panel polls.
#include <fmt/format.h>

#include "engine/engine.h"
#include "server/routes.h"

namespace kvlm {

using openai::Json;

namespace {

// How the shared tier's records are protected, so an unauthenticated one is
// visible where operators look (docs/kv-tiers.md "Threat model").
Json shared_tier_status(const Engine& engine) {
  const auto& tiers = engine.config().tiers;
  if (!tiers || !tiers->redis) return nullptr;
  const TierSecurity& s = tiers->redis->security;
  Json j = {{"records", s.encrypt ? "sealed" : s.authenticated() ? "authenticated" : "unauthenticated"}};
  if (!s.authenticated())
    j["warning"] = "anyone who can write to the Redis tier can change what requests compute, and anyone who can "
                   "read it can read their prompts; start every server with the same --kv-secret-file";
  return j;
}

}  // namespace

void handle_status(ServerContext& ctx, const http::Request&, http::Response& res) {
  const EngineMetrics m = ctx.engine.metrics();
  const double hit_rate =
      m.num_prefix_query_tokens > 0 ? static_cast<double>(m.num_prefix_hit_tokens) / m.num_prefix_query_tokens : 0.0;
  const Json body = {
      {"model", ctx.model_names[0]},
      {"models", ctx.model_names},  // every name it answers to (routers route by them)
      {"max_model_len", ctx.engine.max_model_len()},
      {"chat_template", ctx.chat_template != nullptr},  // false: the page offers plain completion
      {"draining", ctx.in_flight.draining()},
      {"instance", ctx.instance_id},
      {"requests_running", m.num_running},
      {"requests_waiting", m.num_waiting},
      {"pending_tokens", m.num_pending_tokens},
      {"requests_finished", m.num_requests_finished},
      {"kv_blocks_used", m.num_kv_blocks_used},
      {"kv_blocks_total", m.num_kv_blocks},
      {"kv_block_size", m.block_size},
      {"prefix_cache_query_tokens", m.num_prefix_query_tokens},
      {"prefix_cache_hit_tokens", m.num_prefix_hit_tokens},
      {"prefix_cache_hit_rate", hit_rate},
      {"prompt_tokens_total", m.num_prompt_tokens},
      {"generation_tokens_total", m.num_generated_tokens},
      {"kv_shared_tier", shared_tier_status(ctx.engine)},
  };
  res.set_header("Cache-Control", "no-store");
  res.set_content(body.dump(), "application/json");
}

}  // namespace kvlm
