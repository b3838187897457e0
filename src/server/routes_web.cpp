// The chat page (GET /, its script and style, embedded in the binary) and
// GET /v1/status, the JSON the page's live panel polls.
#include <fmt/format.h>

#include "engine/engine.h"
#include "server/routes.h"
#include "server/web_assets.h"

namespace kvlm {

using openai::Json;

void handle_status(ServerContext& ctx, const httplib::Request&, httplib::Response& res) {
  const EngineMetrics m = ctx.engine.metrics();
  const double hit_rate =
      m.num_prefix_query_tokens > 0 ? static_cast<double>(m.num_prefix_hit_tokens) / m.num_prefix_query_tokens : 0.0;
  const Json body = {
      {"model", ctx.model_name},
      {"max_model_len", ctx.engine.max_model_len()},
      {"chat_template", ctx.chat_template != nullptr},  // false: the page offers plain completion
      {"draining", ctx.in_flight.draining()},
      {"requests_running", m.num_running},
      {"requests_waiting", m.num_waiting},
      {"requests_finished", m.num_requests_finished},
      {"kv_blocks_used", m.num_kv_blocks_used},
      {"kv_blocks_total", m.num_kv_blocks},
      {"kv_block_size", m.block_size},
      {"prefix_cache_query_tokens", m.num_prefix_query_tokens},
      {"prefix_cache_hit_tokens", m.num_prefix_hit_tokens},
      {"prefix_cache_hit_rate", hit_rate},
      {"prompt_tokens_total", m.num_prompt_tokens},
      {"generation_tokens_total", m.num_generated_tokens},
  };
  res.set_header("Cache-Control", "no-store");
  res.set_content(body.dump(), "application/json");
}

void add_web_routes(httplib::Server& http) {
  for (const WebAsset& asset : web_assets()) {
    auto serve = [&asset](const httplib::Request&, httplib::Response& res) {
      res.set_header("Cache-Control", "no-cache");
      res.set_content(asset.bytes.data(), asset.bytes.size(), std::string(asset.content_type));
    };
    http.Get(std::string(asset.path), serve);
    if (asset.path == "/index.html") http.Get("/", serve);
  }
}

}  // namespace kvlm
