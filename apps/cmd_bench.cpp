// kvlm bench <kind>: benchmarks through the real engine.
//   batch — keep C requests in flight until N finish; throughput, TTFT, ITL.
//   model — forward-pass speed alone: prompt processing and generation.
//   serve — an OpenAI-compatible server over HTTP (bench_serve.cpp).
//   constrain — grammar token-mask cost per token (cmd_bench_constrain.cpp).
//   speculative — speculative decoding with a replay proposer (cmd_bench_speculative.cpp).
//   grammar — grammar compilation's time and memory per shape (cmd_bench_grammar.cpp).
//   chunks — KV chunks reused in RAG-shaped prompts: TTFT and quality (cmd_bench_chunks.cpp).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "apps/bench_kv.h"
#include "apps/bench_stats.h"
#include "apps/cli_parse.h"
#include "apps/commands.h"
#include "apps/plot.h"
#include "apps/read_bandwidth.h"
#include "apps/engine_options.h"
#include "apps/lora_options.h"
#include "apps/model_loading.h"
#include "common/error.h"
#include "common/progress.h"
#include "backend/threads.h"
#include "model/lora.h"
#include "model/model.h"
#include "runner/sampler.h"
#include "runner/sequence_evaluator.h"

namespace kvlm::apps {
namespace {

struct BatchWork {
  std::vector<std::vector<int32_t>> prompts;
  int gen_len = 0;
  // Request i runs with loras[i % size] (none: the base alone).
  std::vector<std::shared_ptr<const LoraAdapter>> loras = {};
};

// The step thread's time during one run, by phase, and the share of it spent
// outside the forward pass (the serial work, to be kept under 10%).
nlohmann::json step_profile_json(const StepTimes& before, const StepTimes& after) {
  const StepTimes d{after.schedule_s - before.schedule_s, after.forward_s - before.forward_s,
                    after.sample_s - before.sample_s, after.postprocess_s - before.postprocess_s};
  const double total = d.total_s();
  return {{"schedule_s", d.schedule_s}, {"forward_s", d.forward_s}, {"sample_s", d.sample_s},
          {"postprocess_s", d.postprocess_s},
          {"outside_forward_fraction", total > 0 ? (total - d.forward_s) / total : 0.0}};
}

// One run: C workers keep C requests in flight until every prompt is done.
nlohmann::json run_batch(Engine& engine, const BatchWork& work, int concurrency) {
  const int num_requests = static_cast<int>(work.prompts.size());
  const StepTimes steps_before = engine.metrics().step_times;
  std::atomic<int> next{0};
  std::mutex mu;
  std::vector<RequestStats> stats;
  std::optional<Error> failure;
  ProgressBar bar(fmt::format("concurrency {}", concurrency), num_requests, "requests");
  auto t0 = std::chrono::steady_clock::now();
  auto worker = [&] {
    for (int i = next++; i < num_requests; i = next++) {
      GenerateRequest g;
      g.prompt_tokens = work.prompts[i];
      g.max_tokens = work.gen_len;
      g.ignore_eos = true;
      g.sampling.temperature = 0.f;
      if (!work.loras.empty()) g.lora = work.loras[static_cast<size_t>(i) % work.loras.size()];
      try {
        auto stream = engine.submit(g);
        std::optional<Error> err;
        while (auto ev = stream->next())
          if (ev->error) err = ev->error;
        bar.advance();
        std::lock_guard lock(mu);
        if (err) failure = err;
        stats.push_back(stream->stats());
      } catch (const Error& e) {
        std::lock_guard lock(mu);
        failure = e;
      }
    }
  };
  std::vector<std::thread> workers;
  for (int c = 0; c < std::min(concurrency, num_requests); ++c) workers.emplace_back(worker);
  for (auto& w : workers) w.join();
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (failure) throw *failure;

  std::vector<double> ttft, itl, e2e;
  int64_t prompt_tokens = 0, cached = 0, generated = 0;
  for (const auto& s : stats) {
    ttft.push_back(s.ttft_s * 1e3);
    e2e.push_back(s.e2e_s * 1e3);
    for (double x : s.itl_s) itl.push_back(x * 1e3);
    prompt_tokens += s.num_prompt_tokens;
    cached += s.num_cached_tokens;
    generated += s.num_generated_tokens;
  }
  EngineMetrics m = engine.metrics();
  return {
      {"requests", num_requests},
      {"concurrency", concurrency},
      {"wall_s", wall},
      {"requests_per_s", num_requests / wall},
      {"prompt_tokens_per_s", prompt_tokens / wall},
      {"generated_tokens_per_s", generated / wall},
      {"ttft_ms", to_json(summarize(ttft))},
      {"itl_ms", to_json(summarize(itl))},
      {"e2e_ms", to_json(summarize(e2e))},
      {"prefix_hit_rate", prompt_tokens ? static_cast<double>(cached) / prompt_tokens : 0.0},
      {"peak_kv_blocks", m.peak_kv_blocks_used},
      {"kv_blocks", m.num_kv_blocks},
      {"preemptions", m.num_preemptions},
      {"steps", m.num_steps},
      {"step_profile", step_profile_json(steps_before, m.step_times)},
  };
}

void print_batch_run(const nlohmann::json& r) {
  auto stat = [&](const char* key, const char* s) { return r[key][s].get<double>(); };
  fmt::print("concurrency {} | wall {:.2f} s | {:.2f} req/s | prompt {:.1f} tok/s | generated {:.1f} tok/s\n",
             r["concurrency"].get<int>(), r["wall_s"].get<double>(), r["requests_per_s"].get<double>(),
             r["prompt_tokens_per_s"].get<double>(), r["generated_tokens_per_s"].get<double>());
  fmt::print("  TTFT ms: mean {:.2f} p50 {:.2f} p90 {:.2f} p99 {:.2f} max {:.2f} | ITL ms: mean {:.2f} p50 {:.2f} p90 {:.2f} "
             "p99 {:.2f} max {:.2f}\n",
             stat("ttft_ms", "mean"), stat("ttft_ms", "p50"), stat("ttft_ms", "p90"), stat("ttft_ms", "p99"),
             stat("ttft_ms", "max"), stat("itl_ms", "mean"), stat("itl_ms", "p50"), stat("itl_ms", "p90"),
             stat("itl_ms", "p99"), stat("itl_ms", "max"));
  fmt::print("  prefix hit rate {:.3f} | peak KV blocks {} of {} | preemptions {} | steps {}\n",
             r["prefix_hit_rate"].get<double>(), r["peak_kv_blocks"].get<int>(), r["kv_blocks"].get<int>(),
             r["preemptions"].get<int64_t>(), r["steps"].get<int64_t>());
  const auto& sp = r["step_profile"];
  fmt::print("  step thread: {:.1f}% outside the forward pass (schedule {:.3f} s, forward {:.3f} s, sample {:.3f} s, "
             "postprocess {:.3f} s)\n", 100 * sp["outside_forward_fraction"].get<double>(),
             sp["schedule_s"].get<double>(), sp["forward_s"].get<double>(), sp["sample_s"].get<double>(),
             sp["postprocess_s"].get<double>());
}

LoadPoint batch_point(const nlohmann::json& r) {
  return {r["concurrency"].get<double>(), r["requests_per_s"].get<double>(), r["generated_tokens_per_s"].get<double>(),
          r["ttft_ms"]["p50"].get<double>(), r["itl_ms"]["p50"].get<double>(), r["e2e_ms"]["p50"].get<double>()};
}

int bench_batch(int argc, char** argv) {
  CLI::App app{"Throughput and latency with C requests in flight until N finish", "kvlm bench batch"};
  EngineOptions eo;
  add_engine_options(app, eo);
  int num_requests = 32, concurrency = 8, prompt_len = 128, gen_len = 64, shared_prefix = 0;
  uint64_t seed = 1;
  bool json = false;
  std::vector<int> sweep;
  std::string plot_path;
  app.add_option("--requests", num_requests, "requests in total")->capture_default_str();
  app.add_option("--concurrency", concurrency, "requests in flight")->capture_default_str();
  app.add_option("--prompt-len", prompt_len, "prompt tokens per request")->capture_default_str();
  app.add_option("--gen-len", gen_len, "generated tokens per request")->capture_default_str();
  app.add_option("--shared-prefix", shared_prefix, "leading prompt tokens shared by all requests")->capture_default_str();
  app.add_option("--seed", seed, "seed of the random prompts")->capture_default_str();
  app.add_option("--sweep", sweep, "one run per concurrency, e.g. 1,2,4,8,16")->delimiter(',');
  app.add_option("--plot", plot_path, "write throughput and latency against concurrency to this PNG (gnuplot)");
  app.add_flag("--json", json, "print one JSON object");
  LoraFlags lora;
  add_lora_options(app, lora, "LoRA adapter FILE[:SCALE]; repeatable: request i runs with adapter i mod count");
  KVLM_PARSE(app, argc, argv);
  if (num_requests < 1 || concurrency < 1 || prompt_len < 1 || gen_len < 1)
    throw_error(ErrorCode::kInvalidArgument, "--requests, --concurrency, --prompt-len and --gen-len must be positive");
  if (shared_prefix < 0 || shared_prefix > prompt_len)
    throw_error(ErrorCode::kInvalidArgument, "--shared-prefix must be in [0, --prompt-len]");
  for (int c : sweep)
    if (c < 1) throw_error(ErrorCode::kInvalidArgument, "--sweep takes positive concurrencies, got {}", c);
  if (sweep.empty()) sweep = {concurrency};

  auto engine = start_engine(eo);
  const int32_t vocab = engine->model().config().vocab_size;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> pick(0, vocab - 1);
  std::vector<int32_t> prefix(shared_prefix);
  for (auto& t : prefix) t = pick(rng);
  BatchWork work{std::vector<std::vector<int32_t>>(num_requests), gen_len};
  for (const std::string& s : lora.specs)
    work.loras.push_back(load_lora_spec(parse_lora_spec(s, false), engine->model(), lora.type));
  for (auto& p : work.prompts) {
    p = prefix;
    while (static_cast<int>(p.size()) < prompt_len) p.push_back(pick(rng));
  }
  std::vector<nlohmann::json> runs;
  for (int c : sweep) runs.push_back(run_batch(*engine, work, c));
  if (!plot_path.empty()) {
    std::vector<LoadPoint> points;
    for (const auto& r : runs) points.push_back(batch_point(r));
    write_load_plot(plot_path, fmt::format("kvlm bench batch: {} ({} requests, prompt {}, gen {})", eo.model_path,
                                           num_requests, prompt_len, gen_len), points);
  }
  if (json) {
    // One run: its fields at the top level (as before --sweep); more: a list.
    nlohmann::json out = runs.size() == 1 ? runs[0] : nlohmann::json{{"runs", runs}};
    out.update({{"model", eo.model_path}, {"prompt_len", prompt_len}, {"gen_len", gen_len}, {"shared_prefix", shared_prefix},
                {"loras", lora.specs.size()}, {"lora_type", lora.type}});
    fmt::print("{}\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  } else {
    fmt::print("requests {} prompt {} gen {} shared prefix {}\n", num_requests, prompt_len, gen_len, shared_prefix);
    for (const auto& r : runs) print_batch_run(r);
  }
  return 0;
}

// pp and tg tokens/s as bars, with their standard deviation in the label.
void write_model_plot(const std::string& path, const nlohmann::json& out) {
  PlotPanel panel;
  panel.title = fmt::format("{} threads, KV {}", out["threads"].get<int>(), out["kv_type"].get<std::string>());
  panel.y_label = "tokens/s";
  PlotSeries speed{"tokens/s", {}, false};
  for (const char* kind : {"pp", "tg"}) {
    if (!out.contains(kind)) continue;
    const auto& k = out[kind];
    panel.x_labels.push_back(fmt::format("{}{} (±{:.0f})", kind, k["tokens"].get<int>(), k["stddev"].get<double>()));
    speed.y.push_back(k["tokens_per_s"].get<double>());
  }
  panel.series = {speed};
  write_plot_png(path, fmt::format("kvlm bench model: {}", out["model"].get<std::string>()), {panel});
}

struct ModelBenchOptions {
  std::string model_path, kv_type = "f16", plot_path;
  int threads = 0, pp = 512, tg = 128, reps = 3, depth = 0;
  bool json = false, bandwidth = true;
};

// Mean and sample standard deviation of tokens/s over the timed runs.
std::pair<double, double> mean_sd(const std::vector<double>& r) {
  double mean = 0, var = 0;
  for (double x : r) mean += x / r.size();
  for (double x : r) var += (x - mean) * (x - mean) / std::max<size_t>(1, r.size() - 1);
  return {mean, std::sqrt(var)};
}

// Bytes of K and V one token's attention reads per cached token (every layer
// and KV head; sliding windows ignored, so an upper bound for Gemma-2).
double kv_bytes_per_context_token(const ModelConfig& c, DType kv) {
  return 2.0 * c.num_layers * c.num_kv_heads * static_cast<double>(row_bytes(kv, c.head_dim));
}

// pp and tg after `depth` tokens of context: the context is prefilled once
// (untimed) and each run rewinds to it, so every run sees the same KV.
// probe (nullable): a read-bandwidth pass after every kProbeEveryTokens
// generated tokens of the counted runs, untimed, their mean in
// bandwidth_gb_s (passes after the runs make up at least five, as with short
// or no tg runs): the memory of the hosts we measure on changes speed
// within seconds, and a pass after each tg run (three 5 ms samples of a 5 s
// measurement) put Q4_0 decode anywhere from 84% to 107% of its limit; a
// pass every 32 tokens 79-99% (Zen 5, 2026-12-03).
nlohmann::json measure_model(const Model& model, const ModelBenchOptions& o, ReadBandwidthProbe* probe,
                             double& bandwidth_gb_s) {
  constexpr int kProbeEveryTokens = 32;  // passes cost tg 2-4% at every 16 (they evict the caches)
  SequenceEvaluator eval(model, o.depth + std::max({o.pp, o.tg, 1}), parse_kv_type(o.kv_type));
  std::mt19937 rng(42);
  std::uniform_int_distribution<int32_t> pick(0, model.config().vocab_size - 1);
  if (o.depth > 0) {
    std::vector<int32_t> context(o.depth);
    for (auto& t : context) t = pick(rng);
    ProgressBar bar("context", 1, "prefills");
    eval.eval(context, /*all_logits=*/false);
    bar.advance();
  }
  // The first run warms caches and is dropped; each run reports the context
  // it ended with, read back from the evaluator. body(counted) runs once,
  // counted false for that first run, and returns the seconds of its run not
  // to count (the probe's passes).
  std::vector<double> passes;  // GB/s, of the counted runs
  auto rate = [&](auto&& body, int n, const char* what) {
    ProgressBar bar(what, o.reps + 1, "runs");
    std::vector<double> r;
    int32_t context_end = 0;
    for (int i = 0; i < o.reps + 1; ++i, bar.advance()) {
      eval.rewind(o.depth);
      auto t0 = std::chrono::steady_clock::now();
      const double untimed = body(i > 0);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() - untimed;
      context_end = eval.num_tokens();
      if (i > 0) r.push_back(n / s);
    }
    auto [mean, sd] = mean_sd(r);
    return nlohmann::json{{"tokens", n}, {"tokens_per_s", mean}, {"stddev", sd}, {"depth", o.depth},
                          {"context_end", context_end}};
  };
  nlohmann::json out;
  if (o.pp > 0) {
    std::vector<int32_t> prompt(o.pp);
    for (auto& t : prompt) t = pick(rng);
    out["pp"] = rate([&](bool) {
      eval.eval(prompt, /*all_logits=*/false);
      return 0.0;
    }, o.pp, "prompt processing");
  }
  if (o.tg > 0) {
    out["tg"] = rate([&](bool counted) {
      int32_t t = 1;
      double untimed = 0.0;
      for (int i = 0; i < o.tg; ++i) {
        t = argmax(eval.eval(std::span<const int32_t>(&t, 1), false));
        if (probe == nullptr || (i + 1) % kProbeEveryTokens != 0) continue;
        const auto p0 = std::chrono::steady_clock::now();
        const double gb_s = probe->pass_gb_s();
        untimed += std::chrono::duration<double>(std::chrono::steady_clock::now() - p0).count();
        if (counted) passes.push_back(gb_s);
      }
      return untimed;
    }, o.tg, "generation");
  }
  while (probe != nullptr && passes.size() < 5) passes.push_back(probe->pass_gb_s());
  bandwidth_gb_s = passes.empty() ? 0.0 : mean_sd(passes).first;
  return out;
}

// The decode limit: every weight byte a token reads (as docs/performance.md's
// tables count them: all of them, but only k of E experts' stacks in a MoE) plus
// the KV of the mean context of a tg run, read once per token at the
// measured read bandwidth.
void add_bandwidth_limit(nlohmann::json& out, const ModelConfig& c, DType kv, double bandwidth_gb_s) {
  out["read_bandwidth_gb_s"] = bandwidth_gb_s;
  if (!out.contains("tg")) return;
  const auto& tg = out["tg"];
  const double mean_context = tg["depth"].get<int>() + (tg["tokens"].get<int>() + 1) / 2.0;
  const double kv_bytes = kv_bytes_per_context_token(c, kv) * mean_context;
  const double bytes_per_token = out["decode_weight_bytes"].get<double>() + kv_bytes;
  const double limit = bandwidth_gb_s * 1e9 / bytes_per_token;
  out["kv_bytes_per_token"] = kv_bytes;
  out["tg_limit_tokens_per_s"] = limit;
  out["tg_fraction_of_limit"] = tg["tokens_per_s"].get<double>() / limit;
}

void print_model_bench(const nlohmann::json& out) {
  fmt::print("model {} | {:.2f} M params, {:.2f} MiB | threads {} | KV {} | depth {}\n",
             out["model"].get<std::string>(), out["params"].get<double>() / 1e6,
             out["weight_bytes"].get<double>() / 1048576.0, out["threads"].get<int>(),
             out["kv_type"].get<std::string>(), out["depth"].get<int>());
  for (const char* kind : {"pp", "tg"})
    if (out.contains(kind))
      fmt::print("{}{:<6} {:>10.1f} ± {:.1f} tokens/s\n", kind, out[kind]["tokens"].get<int>(),
                 out[kind]["tokens_per_s"].get<double>(), out[kind]["stddev"].get<double>());
  if (out.contains("read_bandwidth_gb_s"))
    fmt::print("read bandwidth {:.1f} GB/s", out["read_bandwidth_gb_s"].get<double>());
  if (out.contains("tg_fraction_of_limit"))
    fmt::print(" | tg limit {:.1f} tokens/s ({:.1f} MiB of weights + {:.1f} MiB KV per token) | tg at {:.0f}% of it",
               out["tg_limit_tokens_per_s"].get<double>(), out["decode_weight_bytes"].get<double>() / 1048576.0,
               out["kv_bytes_per_token"].get<double>() / 1048576.0, 100 * out["tg_fraction_of_limit"].get<double>());
  if (out.contains("read_bandwidth_gb_s")) fmt::print("\n");
}

// Raw model speed as llama-bench reports it: pp = prompt processing (one
// batched forward pass over N tokens), tg = token generation (N forward passes
// of one token each), no engine or sampling in the way; --depth N first fills
// N tokens of context (llama-bench -d).
int bench_model(int argc, char** argv) {
  CLI::App app{"Prompt-processing and token-generation speed of the forward pass (llama-bench style)",
               "kvlm bench model"};
  ModelBenchOptions o;
  bool no_bandwidth = false;
  app.add_option("-m,--model", o.model_path, "GGUF model file or Hugging Face checkpoint folder")->required();
  app.add_option("-t,--threads", o.threads, "compute threads (default: all cores)");
  app.add_option("-p,--n-prompt", o.pp, "prompt tokens (0: skip)")->capture_default_str();
  app.add_option("-n,--n-gen", o.tg, "generated tokens (0: skip)")->capture_default_str();
  app.add_option("-d,--depth", o.depth, "tokens of context before pp and tg (llama-bench -d)")->capture_default_str();
  app.add_option("-r,--repetitions", o.reps, "repetitions")->capture_default_str();
  app.add_option("--kv-type", o.kv_type, "KV cache type: f16, bf16, f32, q8_0, q4_0")->capture_default_str();
  app.add_flag("--no-bandwidth", no_bandwidth, "skip the read-bandwidth probe (and the tg limit)");
  app.add_flag("--json", o.json, "print one JSON object");
  app.add_option("--plot", o.plot_path, "write a bar chart of the speeds to this PNG (gnuplot)");
  KVLM_PARSE(app, argc, argv);
  o.bandwidth = !no_bandwidth;
  if (o.pp < 0 || o.tg < 0 || o.reps < 1 || o.pp + o.tg == 0 || o.depth < 0)
    throw_error(ErrorCode::kInvalidArgument, "-p, -n and --depth must be >= 0 (-p and -n not both 0) and -r >= 1");
  set_num_threads(o.threads);
  auto model = load_model(o.model_path);
  int64_t num_params = 0, num_bytes = 0;
  double decode_bytes = 0;
  const MoeConfig& moe = model->config().moe;
  for (const auto& t : model->gguf().tensors()) {
    num_params += t.num_elements();
    num_bytes += static_cast<int64_t>(t.num_bytes);
    // A decode token routes to num_experts_used of the stacks' num_experts slices.
    const bool expert_stack = moe.enabled() && t.name.find("_exps.") != std::string::npos;
    decode_bytes += static_cast<double>(t.num_bytes) *
                    (expert_stack ? static_cast<double>(moe.num_experts_used) / moe.num_experts : 1.0);
  }
  std::optional<ReadBandwidthProbe> probe;
  if (o.bandwidth) probe.emplace();
  double bandwidth_gb_s = 0.0;
  nlohmann::json out = measure_model(*model, o, probe ? &*probe : nullptr, bandwidth_gb_s);
  out.update({{"model", o.model_path}, {"threads", num_threads()}, {"kv_type", o.kv_type}, {"params", num_params},
              {"weight_bytes", num_bytes}, {"decode_weight_bytes", decode_bytes}, {"depth", o.depth}});
  if (o.bandwidth) add_bandwidth_limit(out, model->config(), parse_kv_type(o.kv_type), bandwidth_gb_s);
  if (!o.plot_path.empty()) write_model_plot(o.plot_path, out);
  if (o.json) {
    fmt::print("{}\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  } else {
    print_model_bench(out);
  }
  return 0;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  const char* usage = "usage: kvlm bench (batch | model | serve | kv | constrain | grammar | speculative | chunks) [options]   (kvlm bench <kind> --help)\n";
  if (argc < 2) {
    std::fputs(usage, stderr);
    return 2;
  }
  std::string kind = argv[1];
  if (kind == "batch") return bench_batch(argc - 1, argv + 1);
  if (kind == "model") return bench_model(argc - 1, argv + 1);
  if (kind == "kv") return bench_kv(argc - 1, argv + 1);
  if (kind == "serve") return bench_serve(argc - 1, argv + 1);
  if (kind == "constrain") return bench_constrain(argc - 1, argv + 1);
  if (kind == "grammar") return bench_grammar(argc - 1, argv + 1);
  if (kind == "speculative") return bench_speculative(argc - 1, argv + 1);
  if (kind == "chunks") return bench_chunks(argc - 1, argv + 1);
  if (kind == "-h" || kind == "--help") {
    std::fputs(usage, stdout);
    return 0;
  }
  throw_error(ErrorCode::kInvalidArgument, "unknown benchmark '{}' (batch, model, serve, kv, constrain, grammar, speculative, chunks)", kind);
}

}  // namespace kvlm::apps
