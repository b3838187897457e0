// Flags shared by the commands that start an engine (run, serve, bench), and
// the loading of model + tokenizer + engine from them.
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "apps/tier_options.h"
#include "engine/engine.h"

namespace kvlm::apps {

struct EngineOptions {
  std::string model_path;
  int threads = 0;
  std::string kv_type = "f16";
  int block_size = 16;
  int64_t kv_mem = 0;
  int ctx = 0;
  int max_model_len = 0;
  int max_batched_tokens = 2048;
  int max_seqs = 64;
  bool no_prefix_cache = false;
  bool verbose = false;
  // KV budget per sequence (0: unbounded) and its eviction policy.
  int kv_budget = 0;
  std::string kv_policy = "sinks";
  int kv_sinks = 4;
  int kv_recent = 0;
  TierOptions tiers;  // --kv-disk, --kv-redis, ...
  bool kv_shift = false;
};

// Budget flags alone (perplexity takes them without the other engine flags).
void add_kv_budget_options(CLI::App& app, EngineOptions& o);
// The budget the flags describe; Error(kInvalidArgument) naming the flag.
KvBudget make_kv_budget(const EngineOptions& o);

void add_engine_options(CLI::App& app, EngineOptions& o);
// "f16" / "f32" / "q8_0" -> DType; Error(kInvalidArgument) naming --kv-type otherwise.
DType parse_kv_type(const std::string& name);
EngineConfig make_engine_config(const EngineOptions& o);
// Loads the model and its tokenizer and starts an engine. Throws kvlm::Error.
std::unique_ptr<Engine> start_engine(const EngineOptions& o);

}  // namespace kvlm::apps
