// kvlm make-model --preset tinyllama-1.1b --type Q4_0 --vocab-from VOCAB.gguf -o OUT.gguf:
// a random-weight GGUF of a real model's shape, for benchmarks without downloads.
#include <chrono>
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "apps/commands.h"
#include "backend/threads.h"
#include "common/error.h"
#include "model/make_model.h"

namespace kvlm::apps {
namespace {

struct ShapeFlags {
  std::string arch;
  int32_t dim = 0, layers = 0, heads = 0, kv_heads = 0, ffn = 0, vocab = 0, ctx = 0;
  float rope_base = 0.0f;
};

// The preset's shape (or a blank one) with every explicit flag applied.
ModelShape resolve_shape(const CLI::App& app, const std::string& preset_name, const ShapeFlags& f) {
  ModelShape s;
  if (!preset_name.empty()) {
    auto p = model_preset(preset_name);
    if (!p)
      throw_error(ErrorCode::kInvalidArgument, "unknown --preset '{}' (known: {})", preset_name,
                  fmt::join(model_preset_names(), ", "));
    s = *p;
  } else {
    for (const char* flag : {"--dim", "--layers", "--heads", "--ffn"})
      if (app.count(flag) == 0)
        throw_error(ErrorCode::kInvalidArgument, "without --preset, {} is required (and --dim, --layers, --heads, --ffn)",
                    flag);
  }
  auto given = [&](const char* flag) { return app.count(flag) > 0; };
  if (given("--arch")) s.arch = f.arch;
  if (given("--dim")) s.dim = f.dim;
  if (given("--layers")) s.num_layers = f.layers;
  if (given("--heads")) s.num_heads = f.heads;
  if (given("--kv-heads")) s.num_kv_heads = f.kv_heads;
  else if (preset_name.empty()) s.num_kv_heads = s.num_heads;
  if (given("--ffn")) s.ffn_dim = f.ffn;
  if (given("--vocab")) s.vocab_size = f.vocab;
  if (given("--ctx")) s.context_length = f.ctx;
  if (given("--rope-base")) s.rope_base = f.rope_base;
  // Qwen2 ties its small models' embeddings; an explicit llama shape keeps output.weight.
  if (preset_name.empty()) s.tied_embeddings = false;
  return s;
}

}  // namespace

int cmd_make_model(int argc, char** argv) {
  CLI::App app{"Write a random-weight GGUF of a real model's shape (for benchmarks)", "kvlm make-model"};
  std::string preset_name, type_name = "Q4_0", out_path, vocab_from;
  ShapeFlags f;
  uint64_t seed = 0;
  int threads = 0;
  bool tied = false;
  app.add_option("--preset", preset_name, "shape: " + fmt::format("{}", fmt::join(model_preset_names(), ", ")));
  app.add_option("--type", type_name, "matrix type: Q4_0, Q8_0, Q4_K, Q6_K, F16, F32, BF16")->capture_default_str();
  app.add_option("--vocab-from", vocab_from, "GGUF whose tokenizer metadata is copied")->required();
  app.add_option("-o,--output", out_path, "output GGUF file")->required();
  app.add_option("--seed", seed, "random seed (same seed, same bytes)")->capture_default_str();
  app.add_option("-t,--threads", threads, "compute threads (default: all cores)");
  app.add_option("--arch", f.arch, "llama or qwen2 (Q/K/V biases)");
  app.add_option("--dim", f.dim, "embedding length");
  app.add_option("--layers", f.layers, "number of blocks");
  app.add_option("--heads", f.heads, "attention heads");
  app.add_option("--kv-heads", f.kv_heads, "key/value heads (default: --heads)");
  app.add_option("--ffn", f.ffn, "feed-forward length");
  app.add_option("--vocab", f.vocab, "vocabulary size (default: the tokenizer's; not smaller)");
  app.add_option("--ctx", f.ctx, "context length (default 2048)");
  app.add_option("--rope-base", f.rope_base, "rope frequency base (default 10000)");
  app.add_flag("--tied", tied, "no output.weight: the embedding table is the output head");
  CLI11_PARSE(app, argc, argv);

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
