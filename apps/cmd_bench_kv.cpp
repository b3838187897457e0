// kvlm bench kv: what each KV eviction policy costs in quality at each budget.
// The text is scored as a stream (apps/stream_scoring.h) once with the full
// cache and once per policy and budget; the table gives perplexity, the KV
// memory one sequence held at most, and tokens/s.
#include <cstdio>
#include <fstream>
#include <sstream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "apps/bench_kv.h"
#include "apps/cli_parse.h"
#include "apps/engine_options.h"
#include "apps/kv_policy_spec.h"
#include "apps/stream_scoring.h"
#include "common/error.h"
#include "common/mapped_file.h"
#include "model/model.h"
#include "runner/kv_storage.h"
#include "tokenizer/tokenizer.h"

namespace kvlm::apps {
namespace {

struct KvRow {
  std::string policy;  // "full" for the unbounded baseline
  int32_t budget = 0;
  StreamScore score;
  double kv_bytes = 0;  // most KV bytes one sequence held
};

// "all" stands for every fixed policy; oracle and learned:FILE are named.
std::vector<KvPolicySpec> parse_policies(const std::string& list, const ModelConfig& model) {
  std::vector<KvPolicySpec> out;
  std::stringstream ss(list);
  for (std::string name; std::getline(ss, name, ',');) {
    if (name == "all") {
      for (KvPolicyKind k : all_kv_policies()) out.push_back({std::string(kv_policy_name(k)), k, nullptr});
      continue;
    }
    out.push_back(parse_kv_policy_spec(name, model, /*allow_oracle=*/true));
  }
  if (out.empty()) throw_error(ErrorCode::kInvalidArgument, "--policies is empty");
  return out;
}

std::vector<int32_t> parse_budgets(const std::string& list) {
  std::vector<int32_t> out;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');) {
    try {
      const int v = std::stoi(item);
      if (v <= 0) throw std::out_of_range("budget");
      out.push_back(v);
    } catch (const std::exception&) {
      throw_error(ErrorCode::kInvalidArgument, "--budgets: '{}' is not a positive token count", item);
    }
  }
  if (out.empty()) throw_error(ErrorCode::kInvalidArgument, "--budgets is empty");
  return out;
}

void print_table(const std::vector<KvRow>& rows, const std::vector<int32_t>& budgets) {
  fmt::print("{:<12}", "policy");
  for (int32_t b : budgets) fmt::print(" {:>10}", fmt::format("B={}", b));
  fmt::print("\n");
  const KvRow& full = rows.front();
  fmt::print("{:<12}", "full");
  for (size_t i = 0; i < budgets.size(); ++i) fmt::print(" {:>10.4f}", full.score.perplexity());
  fmt::print("   (KV {:.1f} KiB/seq)\n", full.kv_bytes / 1024);
  for (size_t r = 1; r < rows.size(); r += budgets.size()) {
    fmt::print("{:<12}", rows[r].policy);
    for (size_t i = 0; i < budgets.size(); ++i) fmt::print(" {:>10.4f}", rows[r + i].score.perplexity());
    fmt::print("\n");
  }
  fmt::print("\n{:<12} {:>7} {:>10} {:>8} {:>12} {:>10}\n", "policy", "budget", "ppl", "+/-", "KV KiB/seq", "tok/s");
  for (const KvRow& row : rows)
    fmt::print("{:<12} {:>7} {:>10.4f} {:>8.4f} {:>12.1f} {:>10.0f}\n", row.policy, row.budget, row.score.perplexity(),
               row.score.perplexity_error(), row.kv_bytes / 1024, row.score.num_evaluated / row.score.seconds);
}

nlohmann::json to_json(const std::vector<KvRow>& rows, const std::string& model, int32_t n_ctx, bool shift) {
  nlohmann::json j = {{"model", model}, {"ctx", n_ctx}, {"kv_shift", shift}, {"rows", nlohmann::json::array()}};
  for (const KvRow& r : rows)
    j["rows"].push_back({{"policy", r.policy},
                         {"budget", r.budget},
                         {"perplexity", r.score.perplexity()},
                         {"perplexity_error", r.score.perplexity_error()},
                         {"kv_bytes_per_seq", r.kv_bytes},
                         {"peak_resident_tokens", r.score.peak_resident_tokens},
                         {"tokens_per_s", r.score.num_evaluated / r.score.seconds},
                         {"scored_tokens", r.score.num_scored}});
  return j;
}

// One line per policy over the budgets, the full cache as the reference.
void plot_rows(const std::string& path, const std::vector<KvRow>& rows, const std::vector<int32_t>& budgets,
               const std::string& title) {
  std::vector<KvPlotSeries> series;
  for (size_t r = 1; r < rows.size(); r += budgets.size()) {
    KvPlotSeries s{rows[r].policy, {}};
    for (size_t i = 0; i < budgets.size(); ++i) s.points.emplace_back(budgets[i], rows[r + i].score.perplexity());
    series.push_back(std::move(s));
  }
  write_kv_plot(path, series, rows.front().score.perplexity(), title);
}

}  // namespace

int bench_kv(int argc, char** argv) {
  CLI::App app{"Perplexity against KV memory for each eviction policy and budget", "kvlm bench kv"};
  EngineOptions eo;
  add_engine_options(app, eo);
  std::string text_path, budgets_arg = "32,64,128,256", policies_arg = "all", plot_path;
  int n_ctx = 512, max_chunks = 0;
  bool json = false;
  app.add_option("-f,--file", text_path, "text file to score")->required();
  app.add_option("-c,--chunk,--ctx-size", n_ctx, "tokens per chunk (each chunk is one stream)")->capture_default_str();
  app.add_option("--budgets", budgets_arg, "comma-separated KV budgets in tokens")->capture_default_str();
  app.add_option("--policies", policies_arg, "comma-separated policies (all: every fixed one; oracle; learned:POLICY.json)")->capture_default_str();
  app.add_option("--chunks", max_chunks, "score at most this many chunks (0 = all)");
  int first_chunk = 0;
  app.add_option("--first-chunk", first_chunk,
                 "skip this many chunks first (held-out text: kv train-policy --chunks N trains on the first N)");
  app.add_flag("--json", json, "print JSON instead of the table");
  app.add_option("--plot", plot_path, "write a PNG of perplexity against budget (needs gnuplot)");
  int profile_chunks = 0;
  app.add_option("--attention-profile", profile_chunks,
                 "first print where attention goes (first tokens, newest tokens) over this many chunks");
  KVLM_PARSE(app, argc, argv);

  const std::vector<int32_t> budgets = parse_budgets(budgets_arg);
  if (n_ctx < 4) throw_error(ErrorCode::kInvalidArgument, "--chunk {} is too small", n_ctx);
  // Each chunk is a whole request: the context must hold it (positions past
  // the trained context extrapolate; with --kv-shift the budget bounds them).
  if (eo.max_model_len == 0) eo.max_model_len = n_ctx + 1;
  // --kv-shift and --kv-sinks apply to every measured budget, not the engine's default.
  const bool shift = eo.kv_shift;
  eo.kv_shift = false;
  eo.kv_budget = 0;
  eo.kv_policy = "sinks";  // --policies names them
  auto engine = start_engine(eo);
  KvBudget base = make_kv_budget(eo, nullptr, false);
  base.shift = shift;
  const std::vector<KvPolicySpec> policies = parse_policies(policies_arg, engine->model().config());
  const std::string text = read_file_bytes(text_path);
  const std::vector<int32_t> tokens = engine->tokenizer().encode(text, /*add_special=*/true, /*parse_special=*/false);
  const int32_t num_chunks = num_stream_chunks(tokens.size(), n_ctx, 0) - first_chunk;
  const int32_t num_scored_chunks = max_chunks > 0 ? std::min(max_chunks, num_chunks) : num_chunks;
  const size_t bytes_per_token =
      KvStorage::bytes_per_block(engine->model(), engine->config().kv_dtype, engine->config().block_size) /
      static_cast<size_t>(engine->config().block_size);
  fmt::print(stderr, "bench kv: {} tokens, chunks {}..{} of {}{}\n", tokens.size(), first_chunk,
             first_chunk + num_scored_chunks, n_ctx, shift ? ", kv shift" : "");

  if (profile_chunks > 0) {
    const Tokenizer& tok = engine->tokenizer();
    const std::optional<int32_t> bos = tok.add_bos() ? tok.bos_id() : std::nullopt;
    fmt::print(stderr, "{}\n",
               format_attention_profile(attention_profile(engine->model(), engine->config().kv_dtype, tokens, n_ctx,
                                                          profile_chunks, bos)));
  }
  std::vector<KvRow> rows;
  std::vector<std::shared_ptr<KvAttentionTrace>> traces;  // the oracle's first pass, once for every budget
  auto run = [&](std::string name, int32_t budget, std::optional<KvBudget> b) {
    if (b && b->policy == KvPolicyKind::kOracle && traces.empty())
      traces = record_oracle_traces(*engine, tokens, n_ctx, first_chunk, num_scored_chunks);
    auto budget_of = [&](int32_t c) {
      std::optional<KvBudget> out = b;
      if (out && out->policy == KvPolicyKind::kOracle) out->oracle = traces[static_cast<size_t>(c - first_chunk)];
      return out;
    };
    KvRow row{std::move(name), budget, score_chunks(*engine, tokens, n_ctx, first_chunk, num_scored_chunks, budget_of), 0};
    row.kv_bytes = static_cast<double>(row.score.peak_resident_tokens) * static_cast<double>(bytes_per_token);
    fmt::print(stderr, "  {:<12} {:>6}: ppl {:.4f} ({:.1f} s)\n", row.policy, budget, row.score.perplexity(),
               row.score.seconds);
    rows.push_back(std::move(row));
  };
  run("full", 0, KvBudget{});
  for (const KvPolicySpec& p : policies) {
    for (int32_t budget : budgets) {
      KvBudget b = base;
      b.budget_tokens = budget;
      b.policy = p.kind;
      b.scorer = p.scorer;
      run(p.label, budget, b);
    }
  }
  if (json) {
    fmt::print("{}\n", to_json(rows, eo.model_path, n_ctx, shift).dump(2));
  } else {
    print_table(rows, budgets);
  }
  if (!plot_path.empty()) {
    plot_rows(plot_path, rows, budgets, fmt::format("{} — chunks of {}{}", eo.model_path, n_ctx, shift ? ", kv shift" : ""));
    fmt::print(stderr, "plot: {}\n", plot_path);
  }
  return 0;
}

}  // namespace kvlm::apps
