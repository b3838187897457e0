#include "apps/engine_options.h"
#include "apps/kv_policy_spec.h"
#include "apps/model_loading.h"

#include "common/error.h"
#include "common/log.h"
#include "engine/spec/draft_proposer.h"
#include "engine/fault_injection.h"
#include "model/model.h"
#include "model/quantize_tensors.h"
#include "runner/kv_storage.h"
#include "tokenizer/tokenizer.h"

namespace kvlm::apps {

void add_engine_options(CLI::App& app, EngineOptions& o) {
  app.add_option("-m,--model", o.model_path, "GGUF model file or Hugging Face checkpoint folder")->required();
  app.add_option("-t,--threads", o.threads, "compute threads (default: all cores)");
  app.add_option("--quantize", o.quantize, "convert the weights while loading: q8_0, q4_0, q4_k");
  app.add_option("--kv-type", o.kv_type, "KV cache type: f16, bf16, f32, q8_0, q4_0")->capture_default_str();
  app.add_option("--block-size", o.block_size, "tokens per KV block")->capture_default_str();
  app.add_option("--kv-mem", o.kv_mem, "KV pool size in bytes (default: from --ctx)");
  app.add_option("--ctx", o.ctx, "KV pool size in tokens (default: --max-seqs full contexts, at most min(RAM/4, 4 GiB))");
  app.add_option("--max-model-len", o.max_model_len, "context per request (default: the model's)");
  app.add_option("--max-batched-tokens", o.max_batched_tokens, "token budget of one engine step")->capture_default_str();
  app.add_option("--max-seqs", o.max_seqs, "running sequences at most")->capture_default_str();
  app.add_flag("--no-prefix-cache", o.no_prefix_cache, "disable prefix caching");
  app.add_option("--kv-blend-recompute", o.kv_blend_recompute,
                 "KV chunks reused at a new position: the share of their tokens recomputed in the prompt's context, "
                 "0 to 1 (1: exact; docs/kv-chunks.md; a request's kv_blend_recompute wins)")
      ->capture_default_str();
  app.add_flag("-v,--verbose", o.verbose, "log engine details to stderr");
  add_kv_budget_options(app, o);
  add_tier_options(app, o.tiers);
  app.add_option("--speculate", o.speculate,
                 "speculative decoding: off, ngram (proposals looked up in the prompt and output), draft (a draft "
                 "model proposes; needs --draft-model) (default: draft with --draft-model, else off)");
  app.add_option("--draft-model", o.draft_model_path,
                 "speculative decoding with this smaller GGUF model of the same vocabulary proposing (implies "
                 "--speculate draft)");
  app.add_option("--draft-max-seqs", o.draft_max_seqs,
                 "sequences the draft model keeps KV for at once; others decode without proposals")
      ->capture_default_str();
  app.add_option("--spec-tokens", o.spec_tokens, "proposals per step and sequence (0: adaptive)")
      ->capture_default_str();
  app.add_option("--spec-ngram-min", o.spec_ngram_min, "shortest n-gram matched (--speculate ngram)")
      ->capture_default_str();
  app.add_option("--spec-ngram-max", o.spec_ngram_max, "longest n-gram matched (--speculate ngram)")
      ->capture_default_str();
}

SpeculativeConfig make_speculative_config(const EngineOptions& o) {
  SpeculativeConfig c;
  const bool has_draft = !o.draft_model_path.empty();
  // --draft-model alone means --speculate draft, as llama.cpp's -md does: a
  // draft model has no other use, so asking for both would be noise.
  const std::string mode = o.speculate.empty() ? (has_draft ? "draft" : "off") : o.speculate;
  if (mode == "ngram") {
    c.mode = SpeculateMode::kNgram;
  } else if (mode == "draft") {
    c.mode = SpeculateMode::kDraft;
  } else if (mode != "off") {
    throw_error(ErrorCode::kInvalidArgument, "--speculate: unknown mode '{}' (off, ngram, draft)", mode);
  }
  if (c.mode == SpeculateMode::kDraft && !has_draft)
    throw_error(ErrorCode::kInvalidArgument,
                "--speculate draft needs --draft-model FILE (a smaller GGUF model with the target's vocabulary)");
  if (c.mode != SpeculateMode::kDraft && has_draft)
    throw_error(ErrorCode::kInvalidArgument,
                "--draft-model is for --speculate draft, not --speculate {}: drop one of them", mode);
  if (o.draft_max_seqs < 1)
    throw_error(ErrorCode::kInvalidArgument, "--draft-max-seqs must be >= 1, got {}", o.draft_max_seqs);
  if (o.spec_tokens < 0 || o.spec_tokens > 64)
    throw_error(ErrorCode::kInvalidArgument, "--spec-tokens must be in [0, 64] (0: adaptive), got {}", o.spec_tokens);
  if (o.spec_ngram_min < 1 || o.spec_ngram_max < o.spec_ngram_min)
    throw_error(ErrorCode::kInvalidArgument, "--spec-ngram-min must be >= 1 and <= --spec-ngram-max");
  c.num_spec_tokens = o.spec_tokens;
  c.min_ngram = o.spec_ngram_min;
  c.max_ngram = o.spec_ngram_max;
  return c;
}

void add_kv_budget_options(CLI::App& app, EngineOptions& o) {
  app.add_option("--kv-budget", o.kv_budget,
                 "KV tokens a sequence may hold (0: unbounded); a policy drops the rest");
  app.add_option("--kv-policy", o.kv_policy, "eviction policy under --kv-budget: " + kv_policy_names() + ", learned:POLICY.json (kvlm kv train-policy); bench kv and perplexity: oracle")
      ->capture_default_str();
  app.add_option("--kv-sinks", o.kv_sinks, "first tokens always kept (sinks, entropy, lru, fifo)")
      ->capture_default_str();
  app.add_option("--kv-recent", o.kv_recent,
                 "newest tokens always kept (h2o, tova, entropy, lru); 0: the policy's default")
      ->capture_default_str();
  app.add_flag("--kv-shift", o.kv_shift,
               "renumber positions inside the cache (StreamingLLM): run past the trained context");
}

KvBudget make_kv_budget(const EngineOptions& o, const ModelConfig* model, bool allow_oracle) {
  KvBudget b;
  if (o.kv_budget < 0) throw_error(ErrorCode::kInvalidArgument, "--kv-budget must be >= 0, got {}", o.kv_budget);
  std::optional<KvPolicyKind> kind = parse_kv_policy(o.kv_policy);
  if (model) {
    KvPolicySpec spec = parse_kv_policy_spec(o.kv_policy, *model, allow_oracle);
    kind = spec.kind;
    b.scorer = std::move(spec.scorer);
  } else if (o.kv_policy.starts_with("learned:")) {
    kind = KvPolicyKind::kLearned;  // the scorer comes with the model (start_engine)
  } else if (o.kv_policy == "oracle") {
    if (!allow_oracle)
      throw_error(ErrorCode::kInvalidArgument,
                  "--kv-policy oracle needs a first pass over the same text: use it with kvlm bench kv or perplexity");
    kind = KvPolicyKind::kOracle;
  }
  if (!kind)
    throw_error(ErrorCode::kInvalidArgument, "--kv-policy: unknown policy '{}' ({}, learned:POLICY.json)", o.kv_policy,
                kv_policy_names());
  if (o.kv_shift && o.kv_budget == 0)
    throw_error(ErrorCode::kInvalidArgument, "--kv-shift needs a --kv-budget");
  b.budget_tokens = o.kv_budget;
  b.policy = *kind;
  b.num_sinks = o.kv_sinks;
  b.num_recent = o.kv_recent;
  b.shift = o.kv_shift;
  return b;
}

DType parse_kv_type(const std::string& name) {
  auto kv = dtype_from_name(name);
  if (!kv || (*kv != DType::kF16 && *kv != DType::kBF16 && *kv != DType::kF32 && *kv != DType::kQ8_0 &&
                *kv != DType::kQ4_0))
    throw_error(ErrorCode::kInvalidArgument, "--kv-type: unknown type '{}' (f16, bf16, f32, q8_0, q4_0)", name);
  return *kv;
}

EngineConfig make_engine_config(const EngineOptions& o) {
  EngineConfig c;
  c.num_threads = o.threads;
  c.kv_dtype = parse_kv_type(o.kv_type);
  c.block_size = o.block_size;
  if (o.kv_mem < 0) throw_error(ErrorCode::kInvalidArgument, "--kv-mem must be positive");
  if (o.ctx < 0) throw_error(ErrorCode::kInvalidArgument, "--ctx must be positive");
  c.kv_mem_bytes = o.kv_mem;
  c.kv_tokens = o.ctx;
  c.max_model_len = o.max_model_len;
  c.max_batched_tokens = o.max_batched_tokens;
  c.max_seqs = o.max_seqs;
  c.prefix_caching = !o.no_prefix_cache;
  if (!(o.kv_blend_recompute >= 0 && o.kv_blend_recompute <= 1))
    throw_error(ErrorCode::kInvalidArgument, "--kv-blend-recompute must be between 0 and 1, got {}",
                o.kv_blend_recompute);
  c.kv_blend_recompute = o.kv_blend_recompute;
  c.kv_events = o.kv_events;
  c.kv_event_contents = o.kv_event_contents;
  c.speculative = make_speculative_config(o);
  return c;
}

std::shared_ptr<Proposer> make_draft_proposer(const EngineOptions& o, const Model& target, DType kv_dtype) {
  auto draft = load_model(o.draft_model_path, ModelLoadOptions{o.max_model_len, std::nullopt});
  DraftProposerConfig dc;
  dc.max_seqs = o.draft_max_seqs;
  // Room for a whole request of the target; create() clips it to the draft's context.
  dc.max_tokens = o.max_model_len > 0 ? o.max_model_len : target.config().context_length;
  dc.kv_dtype = kv_dtype;
  return DraftProposer::create(std::move(draft), target, o.draft_model_path, o.model_path, dc);
}

std::unique_ptr<Engine> start_engine(const EngineOptions& o) {
  if (o.verbose) set_log_level(LogLevel::kInfo);
  EngineConfig config = make_engine_config(o);
  config.fault_hook = fault_hook_from_env();  // tests only; inert unless KVLM_FAULT is set
  std::optional<DType> quantize;
  if (!o.quantize.empty()) quantize = parse_weight_type(o.quantize, /*floats_too=*/false);
  auto model = load_model(o.model_path, ModelLoadOptions{o.max_model_len, quantize});
  auto tokenizer = Tokenizer::from_metadata(model->gguf().metadata());
  config.kv_budget = make_kv_budget(o, &model->config(), /*allow_oracle=*/false);
  if (config.speculative.mode == SpeculateMode::kDraft)
    config.speculative.proposer = make_draft_proposer(o, *model, config.kv_dtype);
  if (!o.tiers.disk.empty() || !o.tiers.redis.empty()) {
    // The namespace fingerprints the weights, the KV type and the block size.
    const Hash128 ns = kv_namespace_fingerprint(kv_namespace_spec(model->gguf(), o.kv_type, o.block_size));
    config.tiers =
        make_tier_config(o.tiers, ns, o.block_size, KvStorage::bytes_per_block(*model, config.kv_dtype, o.block_size));
  } else {
    config.tiers = make_tier_config(o.tiers, Hash128{}, o.block_size, 0);  // checks that no tier-only flag came alone
  }
  return std::make_unique<Engine>(std::move(model), std::move(tokenizer), config);
}

}  // namespace kvlm::apps
