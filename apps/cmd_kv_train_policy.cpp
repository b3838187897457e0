// kvlm kv train-policy: fits the learned KV policy (kv/kv_scorer.h) to the
// oracle's choices on a training text (docs/kv-budgets.md "Learned policy").
// For each training chunk the oracle's first pass records the attention, then
// the text runs under the oracle at each budget and, at every eviction point,
// each candidate token's features are recorded with the log of the attention
// the rest of the chunk will give it. A linear model (closed form) and a
// one-hidden-layer MLP (Adam) are fitted; every fifth chunk is kept out of the
// fit to compare them, and the chosen one is written.
#include <cstdio>
#include <sstream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "apps/cli_parse.h"
#include "apps/commands.h"
#include "apps/engine_options.h"
#include "apps/kv_policy_spec.h"
#include "common/error.h"
#include "common/mapped_file.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace kvlm::apps {
namespace {

double mean_squared_error(const KvScorer& scorer, const KvSampleSink& s) {
  double sum = 0;
  for (size_t i = 0; i < s.num_rows(); ++i) {
    const double d = scorer.score({&s.x[i * kNumKvFeatures], kNumKvFeatures}) - s.y[i];
    sum += d * d;
  }
  return s.num_rows() ? sum / static_cast<double>(s.num_rows()) : 0;
}

struct Samples {
  KvSampleSink fit, check;  // check: every fifth chunk, kept out of the fit
};

// Runs the chunks under the oracle at each budget and gathers its samples.
Samples collect(Engine& engine, const std::vector<int32_t>& tokens, int32_t n_ctx, int32_t first_chunk,
                int32_t num_chunks, const std::vector<int32_t>& budgets, int32_t horizon) {
  const auto traces = record_oracle_traces(engine, tokens, n_ctx, first_chunk, num_chunks);
  Samples out;
  for (int32_t budget : budgets) {
    std::vector<std::shared_ptr<KvSampleSink>> sinks;
    for (int32_t i = 0; i < num_chunks; ++i) sinks.push_back(std::make_shared<KvSampleSink>());
    const StreamScore score = score_chunks(engine, tokens, n_ctx, first_chunk, num_chunks, [&](int32_t c) {
      KvBudget b;
      b.budget_tokens = budget;
      b.policy = KvPolicyKind::kOracle;
      b.oracle = traces[static_cast<size_t>(c - first_chunk)];
      b.oracle_horizon = horizon;
      b.samples = sinks[static_cast<size_t>(c - first_chunk)];
      return std::optional<KvBudget>(b);
    });
    for (int32_t i = 0; i < num_chunks; ++i) (i % 5 == 4 ? out.check : out.fit).append(*sinks[static_cast<size_t>(i)]);
    fmt::print(stderr, "train-policy: budget {}: oracle perplexity {:.4f}, {} samples so far\n", budget,
               score.perplexity(), out.fit.num_rows() + out.check.num_rows());
  }
  return out;
}

std::vector<int32_t> parse_int_list(const std::string& list) {
  std::vector<int32_t> out;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(std::stoi(item));
  return out;
}

}  // namespace

int cmd_kv_train_policy(int argc, char** argv) {
  CLI::App app{"Fit the learned KV eviction policy to the oracle on a training text", "kvlm kv train-policy"};
  EngineOptions eo;
  add_engine_options(app, eo);
  std::string text_path, out_path, budgets_arg = "32,64,128", fit = "mlp";
  int n_ctx = 512, first_chunk = 0, max_chunks = 0, hidden = 64, epochs = 24, horizon = 0;
  app.add_option("-f,--file", text_path, "training text")->required();
  app.add_option("-o,--output", out_path, "policy file to write (JSON)")->required();
  app.add_option("-c,--chunk", n_ctx, "tokens per chunk")->capture_default_str();
  app.add_option("--first-chunk", first_chunk, "skip this many chunks first")->capture_default_str();
  app.add_option("--chunks", max_chunks, "train on at most this many chunks (0 = all)");
  app.add_option("--budgets", budgets_arg, "budgets whose eviction points are sampled")->capture_default_str();
  app.add_option("--fit", fit, "model written: mlp or linear")->capture_default_str();
  app.add_option("--hidden", hidden, "hidden units of the MLP")->capture_default_str();
  app.add_option("--epochs", epochs, "MLP epochs")->capture_default_str();
  app.add_option("--horizon", horizon, "future queries the target sums (0: the rest of the chunk)");
  KVLM_PARSE(app, argc, argv);
  if (fit != "mlp" && fit != "linear") throw_error(ErrorCode::kInvalidArgument, "--fit must be mlp or linear");
  if (hidden < 1 || epochs < 1) throw_error(ErrorCode::kInvalidArgument, "--hidden and --epochs must be positive");

  if (eo.max_model_len == 0) eo.max_model_len = n_ctx + 1;
  eo.kv_budget = 0;
  eo.kv_policy = "sinks";
  auto engine = start_engine(eo);
  const std::vector<int32_t> tokens =
      engine->tokenizer().encode(read_file_bytes(text_path), /*add_special=*/true, /*parse_special=*/false);
  const int32_t avail = num_stream_chunks(tokens.size(), n_ctx, 0) - first_chunk;
  const int32_t num_chunks = max_chunks > 0 ? std::min(max_chunks, avail) : avail;
  if (num_chunks < 5) throw_error(ErrorCode::kInvalidArgument, "train-policy needs at least 5 chunks, has {}", num_chunks);
  fmt::print(stderr, "train-policy: chunks {}..{} of {} tokens\n", first_chunk, first_chunk + num_chunks, n_ctx);
  const Samples s = collect(*engine, tokens, n_ctx, first_chunk, num_chunks, parse_int_list(budgets_arg), horizon);

  const std::string model_id = kv_policy_model_id(engine->model().config());
  KvScorerWeights linear = fit_linear(s.fit), mlp = fit_mlp(s.fit, hidden, epochs);
  linear.model_name = mlp.model_name = model_id;
  const KvScorer linear_scorer(linear), mlp_scorer(mlp);
  const int32_t bs = engine->config().block_size;
  nlohmann::json notes = {{"text", text_path}, {"first_chunk", first_chunk}, {"chunks", num_chunks},
                          {"chunk", n_ctx}, {"budgets", budgets_arg}, {"fit_rows", s.fit.num_rows()},
                          {"check_rows", s.check.num_rows()}, {"fit", fit}};
  for (const auto& [name, scorer] : {std::pair{"linear", &linear_scorer}, std::pair{"mlp", &mlp_scorer}}) {
    const double mse = mean_squared_error(*scorer, s.check), agree = eviction_agreement(*scorer, s.check, bs);
    fmt::print(stderr, "train-policy: {:<6} held-out MSE {:.4f}, agrees with the oracle on {:.1f}% of evictions\n",
               name, mse, 100 * agree);
    notes[name] = {{"check_mse", mse}, {"check_agreement", agree}};
  }
  save_kv_policy_file(out_path, fit == "mlp" ? mlp : linear, notes.dump());
  fmt::print(stderr, "train-policy: wrote {} ({})\n", out_path, fit);
  return 0;
}

}  // namespace kvlm::apps
