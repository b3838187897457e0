// Flags shared by the commands that start an engine (run, serve, bench), and
// the loading of model + tokenizer + engine from them.
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "apps/tier_options.h"
#include "engine/engine.h"

namespace kvlm {
struct ModelConfig;
class Model;
}

namespace kvlm::apps {

struct EngineOptions {
  std::string model_path;
  int threads = 0;
  std::string kv_type = "f16";
  int block_size = 16;
  int64_t kv_mem = 0;
  int ctx = 0;
  int max_model_len = 0;
  std::string quantize;  // --quantize: q8_0, q4_0, q4_k; empty: as stored
  int max_batched_tokens = 2048;
  int max_seqs = 64;
  bool no_prefix_cache = false;
  double kv_blend_recompute = 0.15;  // KV chunks: the share recomputed (docs/kv-chunks.md)
  bool verbose = false;
  // KV budget per sequence (0: unbounded) and its eviction policy.
  int kv_budget = 0;
  std::string kv_policy = "sinks";
  int kv_sinks = 4;
  int kv_recent = 0;
  TierOptions tiers;  // --kv-disk, --kv-redis, ...
  bool kv_shift = false;
  bool kv_events = false;  // serve --kv-events: GET /v1/kv/events for a router
  bool kv_event_contents = false;  // serve --kv-events-zmq: stored blocks' tokens in the events
  // Speculative decoding: "off", "ngram" (prompt lookup), "draft" (a draft
  // model); empty: "draft" with --draft-model, else "off". Proposals per
  // step (0: adaptive); the n-gram sizes matched; the draft model's file and
  // the sequences it keeps KV for at once.
  std::string speculate;
  std::string draft_model_path;
  int draft_max_seqs = 16;
  int spec_tokens = 0;
  int spec_ngram_min = 1, spec_ngram_max = 3;
};

// Budget flags alone (perplexity takes them without the other engine flags).
void add_kv_budget_options(CLI::App& app, EngineOptions& o);
// The budget the flags describe; Error(kInvalidArgument) naming the flag.
// model: checks and loads a learned:FILE policy against it (nullptr: the
// scorer is left unset, start_engine loads it). allow_oracle: bench kv and
// perplexity, which run the oracle's first pass.
KvBudget make_kv_budget(const EngineOptions& o, const ModelConfig* model, bool allow_oracle);

void add_engine_options(CLI::App& app, EngineOptions& o);
// "f16" / "bf16" / "f32" / "q8_0" / "q4_0" -> DType; Error(kInvalidArgument) naming --kv-type otherwise.
DType parse_kv_type(const std::string& name);
// Everything but the KV budget, which needs the model (start_engine makes it).
EngineConfig make_engine_config(const EngineOptions& o);
// --speculate and its flags; Error(kInvalidArgument) naming the flag. With
// --draft-model, mode kDraft and no proposer yet: start_engine loads the
// draft (make_draft_proposer) once the target is loaded.
SpeculativeConfig make_speculative_config(const EngineOptions& o);
// Loads --draft-model and checks it against the target (same vocabulary).
// Throws kvlm::Error naming both files.
std::shared_ptr<Proposer> make_draft_proposer(const EngineOptions& o, const Model& target, DType kv_dtype);
// Loads the model and its tokenizer and starts an engine. Throws kvlm::Error.
std::unique_ptr<Engine> start_engine(const EngineOptions& o);

}  // namespace kvlm::apps
