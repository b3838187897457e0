// kvlm bench kv: what each KV eviction policy costs in quality at each budget,
// and for each KV cache type (--kv-type f16,q8_0,q4_0): the memory frontier.
// The text is scored as a stream (apps/stream_scoring.h) once with the full
// cache and once per policy and budget, for each type; the tables give
// perplexity, how far each run's predictions moved from the first type's
// full cache (mean |delta nll|), the KV memory one sequence held at most, and
// tokens/s.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <span>
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
  std::string kv_type;  // "f16", "q4_0", ... as given
  std::string policy;   // "full" for the unbounded baseline
  int32_t budget = 0;
  StreamScore score;
  double kv_bytes = 0;     // most KV bytes one sequence held
  double delta_nll = 0;    // mean |nll - the first type's full cache's|
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

// One type's rows: the full cache first, then each policy over the budgets.
void print_type_table(std::span<const KvRow> rows, const std::vector<int32_t>& budgets) {
  fmt::print("KV type {}\n{:<12}", rows.front().kv_type, "policy");
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
  fmt::print("\n");
}

// Every run, smallest KV first: the frontier a user picks a point from.
void print_frontier(std::vector<KvRow> rows) {
  std::stable_sort(rows.begin(), rows.end(), [](const KvRow& a, const KvRow& b) { return a.kv_bytes < b.kv_bytes; });
  fmt::print("{:<6} {:<12} {:>7} {:>12} {:>10} {:>8} {:>10} {:>8}\n", "kv", "policy", "budget", "KV KiB/seq", "ppl",
             "+/-", "|dnll|", "tok/s");
  for (const KvRow& row : rows)
    fmt::print("{:<6} {:<12} {:>7} {:>12.1f} {:>10.4f} {:>8.4f} {:>10.5f} {:>8.0f}\n", row.kv_type, row.policy,
               row.budget, row.kv_bytes / 1024, row.score.perplexity(), row.score.perplexity_error(), row.delta_nll,
               row.score.num_evaluated / row.score.seconds);
}

void print_table(const std::vector<KvRow>& rows, const std::vector<int32_t>& budgets) {
  for (size_t begin = 0; begin < rows.size();) {
    size_t end = begin + 1;
    while (end < rows.size() && rows[end].kv_type == rows[begin].kv_type) ++end;
    print_type_table(std::span<const KvRow>(rows).subspan(begin, end - begin), budgets);
    begin = end;
  }
  print_frontier(rows);
}

nlohmann::json to_json(const std::vector<KvRow>& rows, const std::string& model, int32_t n_ctx, bool shift) {
  nlohmann::json j = {{"model", model}, {"ctx", n_ctx}, {"kv_shift", shift}, {"rows", nlohmann::json::array()}};
  for (const KvRow& r : rows)
    j["rows"].push_back({{"kv_type", r.kv_type},
                         {"policy", r.policy},
                         {"budget", r.budget},
                         {"perplexity", r.score.perplexity()},
                         {"perplexity_error", r.score.perplexity_error()},
                         {"mean_abs_delta_nll", r.delta_nll},
                         {"kv_bytes_per_seq", r.kv_bytes},
                         {"peak_resident_tokens", r.score.peak_resident_tokens},
                         {"tokens_per_s", r.score.num_evaluated / r.score.seconds},
                         {"scored_tokens", r.score.num_scored}});
  return j;
}

// One line per policy: perplexity over the budgets, the full cache as the
// reference. With several KV types, one line per type and policy of the
// predictions' distance from the first type's full cache over the KV bytes
// they held: the frontier, and meaningful on random-weight models too.
void plot_rows(const std::string& path, const std::vector<KvRow>& rows, const std::vector<int32_t>& budgets,
               const std::string& title) {
  const bool frontier = rows.back().kv_type != rows.front().kv_type;
  // Frontier: a colour per policy (full cache first), a dash type per KV type.
  int type_index = 0, policy_index = 0;
  std::vector<KvPlotSeries> series;
  for (size_t r = 0; r < rows.size(); ++r) {
    if (rows[r].policy == "full") {
      if (r > 0) ++type_index;
      policy_index = 1;
      if (frontier)
        series.push_back({rows[r].kv_type + " full", {{rows[r].kv_bytes / 1024, rows[r].delta_nll}}, 1, type_index + 1});
      continue;
    }
    KvPlotSeries s{frontier ? rows[r].kv_type + " " + rows[r].policy : rows[r].policy, {}};
    if (frontier) s.color = policy_index++ % 8 + 1, s.dash = type_index + 1;
    for (size_t i = 0; i < budgets.size(); ++i, ++r)
      s.points.emplace_back(frontier ? rows[r].kv_bytes / 1024 : budgets[i],
                            frontier ? rows[r].delta_nll : rows[r].score.perplexity());
    --r;
    series.push_back(std::move(s));
  }
  KvPlotAxes axes{title, "KV budget (tokens per sequence)", "perplexity", rows.front().score.perplexity()};
  if (frontier)
    axes = {title, "KV per sequence (KiB)", "mean |delta nll| from the full " + rows.front().kv_type + " cache", {}};
  write_kv_plot(path, series, axes);
}

// What bench_kv measures with, whatever the KV type.
struct KvBenchPlan {
  std::vector<int32_t> budgets;
  std::string policies;
  KvBudget base;
  int32_t n_ctx = 512, first_chunk = 0, max_chunks = 0;
  const std::string* text = nullptr;
};

// The full cache and every policy and budget over one KV type's engine, rows
// appended (the first type's full row is every row's nll reference).
void run_kv_type(Engine& engine, const std::string& kv_type, const KvBenchPlan& plan, std::vector<KvRow>& rows) {
  const std::vector<KvPolicySpec> policies = parse_policies(plan.policies, engine.model().config());
  const std::vector<int32_t> tokens = engine.tokenizer().encode(*plan.text, /*add_special=*/true, /*parse_special=*/false);
  const int32_t num_chunks = num_stream_chunks(tokens.size(), plan.n_ctx, 0) - plan.first_chunk;
  const int32_t num_scored_chunks = plan.max_chunks > 0 ? std::min(plan.max_chunks, num_chunks) : num_chunks;
  const size_t bytes_per_token =
      KvStorage::bytes_per_block(engine.model(), engine.config().kv_dtype, engine.config().block_size) /
      static_cast<size_t>(engine.config().block_size);
  fmt::print(stderr, "bench kv: {} KV, {} tokens, chunks {}..{} of {}{}\n", kv_type, tokens.size(), plan.first_chunk,
             plan.first_chunk + num_scored_chunks, plan.n_ctx, plan.base.shift ? ", kv shift" : "");
  std::vector<std::shared_ptr<KvAttentionTrace>> traces;  // the oracle's first pass, once for every budget
  auto run = [&](std::string name, int32_t budget, std::optional<KvBudget> b) {
    if (b && b->policy == KvPolicyKind::kOracle && traces.empty())
      traces = record_oracle_traces(engine, tokens, plan.n_ctx, plan.first_chunk, num_scored_chunks);
    auto budget_of = [&](int32_t c) {
      std::optional<KvBudget> out = b;
      if (out && out->policy == KvPolicyKind::kOracle) out->oracle = traces[static_cast<size_t>(c - plan.first_chunk)];
      return out;
    };
    KvRow row{kv_type, std::move(name), budget,
              score_chunks(engine, tokens, plan.n_ctx, plan.first_chunk, num_scored_chunks, budget_of), 0, 0};
    row.kv_bytes = static_cast<double>(row.score.peak_resident_tokens) * static_cast<double>(bytes_per_token);
    row.delta_nll = row.score.mean_abs_nll_delta(rows.empty() ? row.score : rows.front().score);
    fmt::print(stderr, "  {:<6} {:<12} {:>6}: ppl {:.4f}, |dnll| {:.5f} ({:.1f} s)\n", kv_type, row.policy, budget,
               row.score.perplexity(), row.delta_nll, row.score.seconds);
    rows.push_back(std::move(row));
  };
  run("full", 0, KvBudget{});
  for (const KvPolicySpec& p : policies) {
    for (int32_t budget : plan.budgets) {
      KvBudget b = plan.base;
      b.budget_tokens = budget;
      b.policy = p.kind;
      b.scorer = p.scorer;
      run(p.label, budget, b);
    }
  }
}

// --attention-profile and --head-analysis, on the first KV type's engine.
void print_analyses(Engine& engine, const std::string& text, int32_t n_ctx, int32_t profile_chunks,
                    int32_t head_chunks, const std::vector<int32_t>& budgets) {
  if (profile_chunks <= 0 && head_chunks <= 0) return;
  const Tokenizer& tok = engine.tokenizer();
  const std::optional<int32_t> bos = tok.add_bos() ? tok.bos_id() : std::nullopt;
  const std::vector<int32_t> tokens = tok.encode(text, /*add_special=*/true, /*parse_special=*/false);
  const DType kv = engine.config().kv_dtype;
  if (profile_chunks > 0)
    fmt::print(stderr, "{}\n",
               format_attention_profile(attention_profile(engine.model(), kv, tokens, n_ctx, profile_chunks, bos)));
  if (head_chunks > 0)
    fmt::print(stderr, "{}",
               format_kv_head_analysis(
                   kv_head_analysis(engine.model(), kv, tokens, n_ctx, head_chunks, bos, budgets, n_ctx / 8)));
}

}  // namespace

int bench_kv(int argc, char** argv) {
  CLI::App app{"Perplexity against KV memory for each eviction policy, budget and KV type", "kvlm bench kv"};
  EngineOptions eo;
  add_engine_options(app, eo);
  // Several types here: each gets an engine and a table, then one frontier.
  app.get_option("--kv-type")->description("KV cache types, comma-separated: f16, bf16, f32, q8_0, q4_0");
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
  app.add_option("--plot", plot_path,
                 "write a PNG of perplexity against budget, or with several --kv-type against KV bytes (needs gnuplot)");
  int profile_chunks = 0;
  app.add_option("--attention-profile", profile_chunks,
                 "first print where attention goes (first tokens, newest tokens) over this many chunks");
  int head_chunks = 0;
  app.add_option("--head-analysis", head_chunks,
                 "first print what per-head selection would keep against one set for all heads, over this many chunks");
  KVLM_PARSE(app, argc, argv);

  KvBenchPlan plan;
  plan.budgets = parse_budgets(budgets_arg);
  plan.policies = policies_arg;
  plan.n_ctx = n_ctx;
  plan.first_chunk = first_chunk;
  plan.max_chunks = max_chunks;
  if (n_ctx < 4) throw_error(ErrorCode::kInvalidArgument, "--chunk {} is too small", n_ctx);
  const std::vector<std::string> kv_types = split_list(eo.kv_type);
  if (kv_types.empty()) throw_error(ErrorCode::kInvalidArgument, "--kv-type is empty");
  // Each chunk is a whole request: the context must hold it (positions past
  // the trained context extrapolate; with --kv-shift the budget bounds them).
  if (eo.max_model_len == 0) eo.max_model_len = n_ctx + 1;
  // --kv-shift and --kv-sinks apply to every measured budget, not the engine's default.
  const bool shift = eo.kv_shift;
  eo.kv_shift = false;
  eo.kv_budget = 0;
  eo.kv_policy = "sinks";  // --policies names them
  plan.base = make_kv_budget(eo, nullptr, false);
  plan.base.shift = shift;
  const std::string text = read_file_bytes(text_path);
  plan.text = &text;

  std::vector<KvRow> rows;
  for (const std::string& kv_type : kv_types) {
    eo.kv_type = kv_type;
    auto engine = start_engine(eo);  // one engine at a time: each holds its own pool
    if (rows.empty()) print_analyses(*engine, text, n_ctx, profile_chunks, head_chunks, plan.budgets);
    run_kv_type(*engine, kv_type, plan, rows);
  }
  if (json) {
    fmt::print("{}\n", to_json(rows, eo.model_path, n_ctx, shift).dump(2));
  } else {
    print_table(rows, plan.budgets);
  }
  if (!plot_path.empty()) {
    plot_rows(plot_path, rows, plan.budgets,
              fmt::format("{} — chunks of {}{}", eo.model_path, n_ctx, shift ? ", kv shift" : ""));
    fmt::print(stderr, "plot: {}\n", plot_path);
  }
  return 0;
}

}  // namespace kvlm::apps
