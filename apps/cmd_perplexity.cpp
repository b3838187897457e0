// kvlm perplexity: llama.cpp's method, so numbers compare side by side —
// the text is tokenized once (BOS first), cut into non-overlapping chunks of
// n_ctx tokens, each chunk starts with BOS, and the second half of each chunk
// is scored (row j predicts token j + 1 for j in [n_ctx/2, n_ctx - 1)).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "apps/cli_parse.h"
#include "apps/commands.h"
#include "apps/engine_options.h"
#include "apps/kv_policy_spec.h"
#include "apps/stream_scoring.h"
#include "apps/model_loading.h"
#include "backend/threads.h"
#include "common/error.h"
#include "common/mapped_file.h"
#include "common/progress.h"
#include "model/model.h"
#include "model/quantize_tensors.h"
#include "runner/sequence_evaluator.h"
#include "tokenizer/tokenizer.h"

namespace kvlm::apps {

namespace {

int perplexity_with_budget(const EngineOptions& o, const std::string& text_path, int n_ctx, int max_chunks) {
  EngineOptions engine_options = o;
  engine_options.kv_budget = 0;  // the budget goes with each chunk
  engine_options.kv_shift = false;
  engine_options.kv_policy = "sinks";
  auto engine = start_engine(engine_options);
  const KvBudget budget = make_kv_budget(o, &engine->model().config(), /*allow_oracle=*/true);
  const std::string text = read_file_bytes(text_path);
  const std::vector<int32_t> tokens = engine->tokenizer().encode(text, /*add_special=*/true, /*parse_special=*/false);
  fmt::print(stderr, "perplexity: {} tokens, {} chunks of {}, KV budget {} ({}{})\n", tokens.size(),
             num_stream_chunks(tokens.size(), n_ctx, max_chunks), n_ctx, budget.budget_tokens,
             o.kv_policy, budget.shift ? ", shift" : "");
  const int32_t num_chunks = num_stream_chunks(tokens.size(), n_ctx, max_chunks);
  std::vector<std::shared_ptr<KvAttentionTrace>> traces;  // the oracle's first pass
  if (budget.policy == KvPolicyKind::kOracle) traces = record_oracle_traces(*engine, tokens, n_ctx, 0, num_chunks);
  const StreamScore s = score_chunks(*engine, tokens, n_ctx, 0, num_chunks, [&](int32_t c) {
    KvBudget b = budget;
    if (!traces.empty()) b.oracle = traces[static_cast<size_t>(c)];
    return std::optional<KvBudget>(b);
  });
  fmt::print(stderr, "{} tokens scored, {:.1f} tokens/s evaluated, at most {} KV tokens per sequence\n", s.num_scored,
             s.num_evaluated / s.seconds, s.peak_resident_tokens);
  fmt::print("PPL = {:.4f} +/- {:.4f}\n", s.perplexity(), s.perplexity_error());
  return 0;
}

// The negative log-likelihoods of the scored tokens, summed.
struct NllSum {
  double nll = 0, nll2 = 0;
  int64_t count = 0;
  void add(double v) {
    nll += v;
    nll2 += v * v;
    ++count;
  }
  double perplexity() const { return std::exp(nll / count); }
  // The perplexity's standard error, as llama.cpp reports it.
  double perplexity_error() const {
    double mean = nll / count;
    double var = nll2 / count - mean * mean;
    double err = count > 1 && var > 0 ? std::sqrt(var / (count - 1)) : 0;
    return std::exp(mean) * err;
  }
};

// -log p(target) under one row of logits, in double.
double token_nll(const float* row, int32_t vocab, int32_t target) {
  double max_logit = row[0];
  for (int32_t i = 1; i < vocab; ++i) max_logit = std::max<double>(max_logit, row[i]);
  double sum = 0;
  for (int32_t i = 0; i < vocab; ++i) sum += std::exp(row[i] - max_logit);
  return -(row[target] - max_logit - std::log(sum));
}

// Scores every chunk's second half, each chunk alone from BOS.
NllSum score_plain_chunks(SequenceEvaluator& eval, int32_t vocab, const Tokenizer& tokenizer,
                          const std::vector<int32_t>& tokens, int n_ctx, int num_chunks) {
  const int first = n_ctx / 2;
  NllSum sum;
  // A terminal gets a bar with the perplexity so far; a log gets one
  // "[chunk]ppl" per chunk, as llama.cpp prints it.
  const bool tty = ProgressBar::enabled();
  std::optional<ProgressBar> bar;
  if (tty) bar.emplace("perplexity", num_chunks, "chunks");
  for (int c = 0; c < num_chunks; ++c) {
    std::vector<int32_t> chunk(tokens.begin() + static_cast<size_t>(c) * n_ctx,
                               tokens.begin() + static_cast<size_t>(c + 1) * n_ctx);
    if (auto bos = tokenizer.bos_id(); bos && tokenizer.add_bos()) chunk[0] = *bos;
    eval.reset();
    const std::vector<float>& logits = eval.eval(chunk, /*all_logits=*/true);
    for (int j = first; j < n_ctx - 1; ++j)
      sum.add(token_nll(&logits[static_cast<size_t>(j) * vocab], vocab, chunk[j + 1]));
    if (tty) {
      bar->set_note(fmt::format("PPL {:.4f}", sum.perplexity()));
      bar->advance();
    } else {
      fmt::print(stderr, "[{}]{:.4f} ", c + 1, sum.perplexity());
    }
  }
  return sum;
}

// Without a KV budget: the model alone through a SequenceEvaluator.
int perplexity_plain(const std::string& model_path, const std::string& text_path, int n_ctx, int max_chunks,
                     int threads, const std::string& kv_type, const std::string& quantize) {
  set_num_threads(threads);
  const DType kv_dtype = parse_kv_type(kv_type);
  if (n_ctx < 4) throw_error(ErrorCode::kInvalidArgument, "--ctx-size {} is too small", n_ctx);
  auto model = load_model(model_path, ModelLoadOptions{n_ctx, quantize.empty() ? std::nullopt : std::optional<DType>(parse_weight_type(quantize, false))});
  auto tokenizer = Tokenizer::from_metadata(model->gguf().metadata());
  const std::string text = read_file_bytes(text_path);
  const std::vector<int32_t> tokens = tokenizer->encode(text, /*add_special=*/true, /*parse_special=*/false);
  int num_chunks = static_cast<int>(tokens.size() / n_ctx);
  if (max_chunks > 0) num_chunks = std::min(num_chunks, max_chunks);
  if (num_chunks == 0)
    throw_error(ErrorCode::kInvalidArgument, "the text has {} tokens, fewer than one chunk of {}", tokens.size(), n_ctx);
  fmt::print(stderr, "perplexity: {} tokens, {} chunks of {}\n", tokens.size(), num_chunks, n_ctx);

  SequenceEvaluator eval(*model, n_ctx, kv_dtype);
  auto t0 = std::chrono::steady_clock::now();
  const NllSum sum = score_plain_chunks(eval, model->config().vocab_size, *tokenizer, tokens, n_ctx, num_chunks);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print(stderr, "\n{} tokens scored, {:.1f} tokens/s evaluated\n", sum.count,
             static_cast<double>(num_chunks) * n_ctx / secs);
  fmt::print("PPL = {:.4f} +/- {:.4f}\n", sum.perplexity(), sum.perplexity_error());
  return 0;
}

}  // namespace

int cmd_perplexity(int argc, char** argv) {
  CLI::App app{"Perplexity of a model over a text file (llama.cpp's method)", "kvlm perplexity"};
  std::string model_path, text_path, kv_type = "f16";
  int n_ctx = 512, threads = 0, max_chunks = 0;
  app.add_option("-m,--model", model_path, "GGUF model file or Hugging Face checkpoint folder")->required();
  app.add_option("-f,--file", text_path, "text file")->required();
  app.add_option("-c,--ctx-size", n_ctx, "tokens per chunk")->capture_default_str();
  std::string quantize;
  app.add_option("--quantize", quantize, "convert the weights while loading: q8_0, q4_0, q4_k");
  app.add_option("-t,--threads", threads, "compute threads (default: all cores)");
  app.add_option("--kv-type", kv_type, "KV cache type: f16, bf16, f32, q8_0, q4_0")->capture_default_str();
  app.add_option("--chunks", max_chunks, "score at most this many chunks (0 = all)");
  EngineOptions budget_options;
  add_kv_budget_options(app, budget_options);
  KVLM_PARSE(app, argc, argv);
  if (budget_options.kv_budget > 0) {
    // A budget needs the engine's scheduler: each chunk streams through it.
    budget_options.model_path = model_path;
    budget_options.threads = threads;
    budget_options.kv_type = kv_type;
    budget_options.max_model_len = n_ctx + 1;
    return perplexity_with_budget(budget_options, text_path, n_ctx, max_chunks);
  }
  return perplexity_plain(model_path, text_path, n_ctx, max_chunks, threads, kv_type, quantize);
}

}  // namespace kvlm::apps
