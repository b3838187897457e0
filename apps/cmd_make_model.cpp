// kvlm make-model --preset tinyllama-1.1b --type Q4_0 --vocab-from VOCAB.gguf -o OUT.gguf:
// a random-weight GGUF of a real model's shape, for benchmarks without downloads.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "apps/cli_parse.h"
#include "apps/commands.h"
#include "backend/threads.h"
#include "common/error.h"
#include "model/make_model.h"

namespace kvlm::apps {
namespace {

struct ShapeFlags {
  std::string arch, rope_scaling, pooling;
  int32_t dim = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, ffn = 0, vocab = 0, ctx = 0;
  int32_t experts = 0, experts_used = 0, expert_ffn = 0, shared_expert_ffn = 0, sliding_window = 0;
  int32_t rope_original_ctx = 0, scale_down = 1;
  float rope_base = 0.0f, rope_factor = 0.0f, rope_low = 0.0f, rope_high = 0.0f;
};

ModelShape preset_or_blank(const CLI::App& app, const std::string& preset_name) {
  if (preset_name.empty()) {
    for (const char* flag : {"--dim", "--layers", "--heads", "--ffn"})
      if (app.count(flag) == 0)
        throw_error(ErrorCode::kInvalidArgument, "without --preset, {} is required (and --dim, --layers, --heads, --ffn)",
                    flag);
    return ModelShape{};
  }
  auto p = model_preset(preset_name);
  if (!p)
    throw_error(ErrorCode::kInvalidArgument, "unknown --preset '{}' (known: {})", preset_name,
                fmt::join(model_preset_names(), ", "));
  return *p;
}

// Experts, RoPE scaling and the window, each only where its flag was given.
void apply_family_flags(const CLI::App& app, const ShapeFlags& f, ModelShape& s) {
  auto given = [&](const char* flag) { return app.count(flag) > 0; };
  if (given("--experts")) s.num_experts = f.experts;
  if (given("--experts-used")) s.num_experts_used = f.experts_used;
  if (given("--expert-ffn")) s.expert_ffn_dim = f.expert_ffn;
  if (given("--shared-expert-ffn")) s.shared_expert_ffn_dim = f.shared_expert_ffn;
  if (given("--rope-scaling")) s.rope_scaling.type = f.rope_scaling;
  if (given("--rope-factor")) s.rope_scaling.factor = f.rope_factor;
  if (given("--rope-low-freq-factor")) s.rope_scaling.low_freq_factor = f.rope_low;
  if (given("--rope-high-freq-factor")) s.rope_scaling.high_freq_factor = f.rope_high;
  if (given("--rope-original-ctx")) s.rope_scaling.original_context = f.rope_original_ctx;
  if (given("--sliding-window")) s.sliding_window = f.sliding_window;
  if (given("--pooling")) {
    if (f.pooling != "rank") throw_error(ErrorCode::kInvalidArgument, "--pooling '{}': only rank is written", f.pooling);
    s.rank_head = true;
  }
  if (f.scale_down < 1) throw_error(ErrorCode::kInvalidArgument, "--scale-down {} must be at least 1", f.scale_down);
  // Fewer layers of the real shape: each layer costs what the real model's
  // does, so per-layer speed and memory traffic stay representative.
  s.num_layers = std::max(1, (s.num_layers + f.scale_down - 1) / f.scale_down);
}

// The preset's shape (or a blank one) with every explicit flag applied.
ModelShape resolve_shape(const CLI::App& app, const std::string& preset_name, const ShapeFlags& f) {
  ModelShape s = preset_or_blank(app, preset_name);
  auto given = [&](const char* flag) { return app.count(flag) > 0; };
  if (given("--arch")) s.arch = f.arch;
  if (given("--dim")) s.dim = f.dim;
  if (given("--layers")) s.num_layers = f.layers;
  if (given("--heads")) s.num_heads = f.heads;
  if (given("--kv-heads")) s.num_kv_heads = f.kv_heads;
  else if (preset_name.empty()) s.num_kv_heads = s.num_heads;
  if (given("--head-dim")) s.head_dim = f.head_dim;
  if (given("--ffn")) s.ffn_dim = f.ffn;
  if (given("--vocab")) s.vocab_size = f.vocab;
  if (given("--ctx")) s.context_length = f.ctx;
  if (given("--rope-base")) s.rope_base = f.rope_base;
  // Qwen2 ties its small models' embeddings; an explicit llama shape keeps output.weight.
  if (preset_name.empty()) s.tied_embeddings = false;
  apply_family_flags(app, f, s);
  return s;
}

void add_shape_options(CLI::App& app, ShapeFlags& f) {
  app.add_option("--arch", f.arch, "llama, qwen2 (Q/K/V biases), qwen2moe, qwen3 (Q/K norms), qwen3moe, phi3");
  app.add_option("--dim", f.dim, "embedding length");
  app.add_option("--layers", f.layers, "number of blocks");
  app.add_option("--heads", f.heads, "attention heads");
  app.add_option("--kv-heads", f.kv_heads, "key/value heads (default: --heads)");
  app.add_option("--head-dim", f.head_dim, "head size (default: --dim / --heads)");
  app.add_option("--ffn", f.ffn, "feed-forward length (Mixtral: each expert's)");
  app.add_option("--vocab", f.vocab, "vocabulary size (default: the tokenizer's; not smaller)");
  app.add_option("--ctx", f.ctx, "context length (default 2048)");
  app.add_option("--rope-base", f.rope_base, "rope frequency base (default 10000)");
  app.add_option("--experts", f.experts, "experts per layer (llama: Mixtral-style MoE)");
  app.add_option("--experts-used", f.experts_used, "experts each token is routed to (top-k)");
  app.add_option("--expert-ffn", f.expert_ffn, "each expert's feed-forward length (qwen2moe, qwen3moe)");
  app.add_option("--shared-expert-ffn", f.shared_expert_ffn, "the shared expert's feed-forward length (qwen2moe)");
  app.add_option("--rope-scaling", f.rope_scaling, "none, llama3 (llama) or longrope (phi3)");
  app.add_option("--rope-factor", f.rope_factor, "llama3: the slowest frequencies' factor (default 8)");
  app.add_option("--rope-low-freq-factor", f.rope_low, "llama3: low_freq_factor (default 1)");
  app.add_option("--rope-high-freq-factor", f.rope_high, "llama3: high_freq_factor (default 4)");
  app.add_option("--rope-original-ctx", f.rope_original_ctx, "llama3, longrope: the original context length");
  app.add_option("--sliding-window", f.sliding_window, "phi3: attention window (0 = none)");
  app.add_option("--pooling", f.pooling, "rank: a Qwen3-Reranker (qwen3; the vocabulary needs 'yes' and 'no')");
  app.add_option("--scale-down", f.scale_down, "keep 1/N of the layers, each of the real shape (a big preset on a small machine)");
}

}  // namespace

int cmd_make_model(int argc, char** argv) {
  CLI::App app{"Write a random-weight GGUF of a real model's shape (for benchmarks)", "kvlm make-model"};
  std::string preset_name, type_name = "Q4_0", out_path, vocab_from;
  ShapeFlags f;
  uint64_t seed = 0;
  float weight_std = 0.02f;
  int threads = 0;
  bool tied = false;
  app.add_option("--preset", preset_name, "shape: " + fmt::format("{}", fmt::join(model_preset_names(), ", ")));
  app.add_option("--type", type_name, "matrix type: Q4_0, Q8_0, Q4_K, Q6_K, F16, F32, BF16")->capture_default_str();
  app.add_option("--vocab-from", vocab_from, "GGUF whose tokenizer metadata is copied")->required();
  app.add_option("-o,--output", out_path, "output GGUF file")->required();
  app.add_option("--seed", seed, "random seed (same seed, same bytes)")->capture_default_str();
  app.add_option("-t,--threads", threads, "compute threads (default: all cores)");
  add_shape_options(app, f);
  app.add_flag("--tied", tied, "no output.weight: the embedding table is the output head");
  app.add_option("--std", weight_std, "standard deviation of the random weights")->capture_default_str();
  KVLM_PARSE(app, argc, argv);

  MakeModelOptions o;
  o.shape = resolve_shape(app, preset_name, f);
  if (tied) o.shape.tied_embeddings = true;
  auto type = dtype_from_name(type_name);
  if (!type || *type == DType::kQ8_K)
    throw_error(ErrorCode::kInvalidArgument, "--type '{}' is not one of Q4_0, Q8_0, Q4_K, Q6_K, F16, F32, BF16",
                type_name);
  o.type = *type;
  o.vocab_from = vocab_from;
  o.out_path = out_path;
  o.seed = seed;
  o.weight_std = weight_std;
  set_num_threads(threads);

  const auto start = std::chrono::steady_clock::now();
  auto log = [](const std::string& line) { fmt::print(stderr, "make-model: {}\n", line); };
  const MakeModelResult r = make_model(o, log);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmt::print(stderr, "make-model: wrote {} ({} parameters, {} bytes = {:.1f} MiB) in {:.1f} s on {} threads\n",
             out_path, r.num_params, r.file_bytes, r.file_bytes / 1048576.0, seconds, num_threads());
  return 0;
}

}  // namespace kvlm::apps
