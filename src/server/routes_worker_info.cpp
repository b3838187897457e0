// What SGLang's router (sglang-router / SGLang Model Gateway) and vLLM's
// router ask of a worker beside the OpenAI routes, in SGLang's shapes:
//   GET /server_info (/get_server_info): the served model's name (the
//       router's model id for the worker), its limits and the KV pool size;
//   GET /model_info (/get_model_info): the model's kind;
//   GET /get_load: the load per data-parallel rank (kvlm has one), which
//       the gateway's load monitor reads for its least-load policies;
//   POST /flush_cache (vLLM's POST /reset_prefix_cache): the prefix cache
//       emptied, which the gateway asks of every worker.
// Without them the gateway registers a kvlm worker under the model id
// "unknown" and routes every request as if all workers were idle.
#include <chrono>
#include <future>

#include "engine/engine.h"
#include "model/config.h"
#include "model/model.h"
#include "server/routes.h"
#include "wire/openai/json_text.h"

namespace kvlm {

using openai::Json;

namespace {

// Tokens the KV pool holds in all: what SGLang calls max_total_tokens.
int64_t pool_tokens(const EngineMetrics& m) { return int64_t{m.num_kv_blocks} * m.block_size; }

}  // namespace

void handle_server_info(ServerContext& ctx, const http::Request&, http::Response& res) {
  const EngineConfig& c = ctx.engine.config();
  const EngineMetrics m = ctx.engine.metrics();
  // No model_path: SGLang's is a Hugging Face id the gateway would load a
  // tokenizer from; kvlm's is a local file. The served name is the id.
  const Json info = {
      {"served_model_name", ctx.model_names[0]},
      {"version", "kvlm"},
      {"dp_size", 1},
      {"context_length", ctx.engine.max_model_len()},
      {"max_total_tokens", pool_tokens(m)},
      {"page_size", m.block_size},
      {"max_running_requests", c.max_seqs},
      {"max_prefill_tokens", c.max_batched_tokens},
      {"chunked_prefill_size", c.max_batched_tokens},
      {"disable_radix_cache", !c.prefix_caching},
  };
  res.set_content(openai::dump_json(info), "application/json");
}

void handle_model_info(ServerContext& ctx, const http::Request&, http::Response& res) {
  const ModelConfig& model = ctx.engine.model().config();
  // A model served for embeddings or ranking is not a generation model.
  const bool generation = model.pooling_type <= 0;
  const Json info = {{"model_type", model.arch_name}, {"is_generation", generation}};
  res.set_content(openai::dump_json(info), "application/json");
}

// One entry per data-parallel rank, as SGLang answers: running and waiting
// requests, and the tokens their KV takes (the load its router compares).
void handle_get_load(ServerContext& ctx, const http::Request&, http::Response& res) {
  const EngineMetrics m = ctx.engine.metrics();
  const Json load = Json::array({{
      {"dp_rank", 0},
      {"num_reqs", m.num_running + m.num_waiting},
      {"num_waiting_reqs", m.num_waiting},
      {"num_tokens", int64_t{m.num_kv_blocks_used} * m.block_size},
      {"num_pending_tokens", m.num_pending_tokens},
  }});
  res.set_content(openai::dump_json(load), "application/json");
}

// SGLang's POST /flush_cache and vLLM's POST /reset_prefix_cache: the
// prefix cache forgets every block (the tiers keep theirs), when no request
// holds blocks; a router calls it on every worker after new weights. 400,
// as SGLang answers, while requests run.
void handle_flush_cache(ServerContext& ctx, const http::Request&, http::Response& res) {
  std::future<bool> done = ctx.engine.reset_prefix_cache();
  bool flushed = false;
  try {
    flushed = done.wait_for(std::chrono::seconds(30)) == std::future_status::ready && done.get();
  } catch (const std::future_error&) {
    flushed = false;  // the engine stopped first
  }
  if (!flushed)
    return send_error(res, {400, "the prefix cache was not flushed: requests hold KV blocks; try again when idle",
                            std::nullopt});
  res.set_content("Cache flushed.\n", "text/plain");
}

}  // namespace kvlm
