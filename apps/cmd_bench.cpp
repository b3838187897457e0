// kvlm bench <kind>: benchmarks through the real engine.
//   batch — keep C requests in flight until N finish; throughput, TTFT, ITL.
//   model — forward-pass speed alone: prompt processing and generation.
//   serve — an OpenAI-compatible server over HTTP (bench_serve.cpp).
//   constrain — grammar token-mask cost per token (cmd_bench_constrain.cpp).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <random>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "apps/bench_kv.h"
#include "apps/bench_stats.h"
#include "apps/commands.h"
#include "apps/plot.h"
#include "apps/engine_options.h"
#include "apps/model_loading.h"
#include "common/error.h"
#include "common/progress.h"
#include "backend/threads.h"
#include "model/model.h"
#include "runner/sampler.h"
#include "runner/sequence_evaluator.h"

namespace kvlm::apps {
namespace {

struct BatchWork {
  std::vector<std::vector<int32_t>> prompts;
  int gen_len = 0;
};

// One run: C workers keep C requests in flight until every prompt is done.
nlohmann::json run_batch(Engine& engine, const BatchWork& work, int concurrency) {
  const int num_requests = static_cast<int>(work.prompts.size());
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
  };
}

void print_batch_run(const nlohmann::json& r) {
  auto stat = [&](const char* key, const char* s) { return r[key][s].get<double>(); };
  fmt::print("concurrency {} | wall {:.2f} s | {:.2f} req/s | prompt {:.1f} tok/s | generated {:.1f} tok/s\n",
             r["concurrency"].get<int>(), r["wall_s"].get<double>(), r["requests_per_s"].get<double>(),
             r["prompt_tokens_per_s"].get<double>(), r["generated_tokens_per_s"].get<double>());
  fmt::print("  TTFT ms: mean {:.2f} p50 {:.2f} p90 {:.2f} p99 {:.2f} | ITL ms: mean {:.2f} p50 {:.2f} p90 {:.2f} p99 {:.2f}\n",
             stat("ttft_ms", "mean"), stat("ttft_ms", "p50"), stat("ttft_ms", "p90"), stat("ttft_ms", "p99"),
             stat("itl_ms", "mean"), stat("itl_ms", "p50"), stat("itl_ms", "p90"), stat("itl_ms", "p99"));
  fmt::print("  prefix hit rate {:.3f} | peak KV blocks {} of {} | preemptions {} | steps {}\n",
             r["prefix_hit_rate"].get<double>(), r["peak_kv_blocks"].get<int>(), r["kv_blocks"].get<int>(),
             r["preemptions"].get<int64_t>(), r["steps"].get<int64_t>());
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
  CLI11_PARSE(app, argc, argv);
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
    out.update({{"model", eo.model_path}, {"prompt_len", prompt_len}, {"gen_len", gen_len}, {"shared_prefix", shared_prefix}});
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

// Raw model speed as llama-bench reports it: pp = prompt processing (one
// batched forward pass over N tokens), tg = token generation (N forward passes
// of one token each), no engine or sampling in the way.
int bench_model(int argc, char** argv) {
  CLI::App app{"Prompt-processing and token-generation speed of the forward pass (llama-bench style)",
               "kvlm bench model"};
  std::string model_path, kv_type = "f16";
  int threads = 0, pp = 512, tg = 128, reps = 3;
  bool json = false;
  app.add_option("-m,--model", model_path, "GGUF model file")->required();
  app.add_option("-t,--threads", threads, "compute threads (default: all cores)");
  app.add_option("-p,--n-prompt", pp, "prompt tokens (0: skip)")->capture_default_str();
  app.add_option("-n,--n-gen", tg, "generated tokens (0: skip)")->capture_default_str();
  app.add_option("-r,--repetitions", reps, "repetitions")->capture_default_str();
  app.add_option("--kv-type", kv_type, "KV cache type: f16, f32, q8_0")->capture_default_str();
  app.add_flag("--json", json, "print one JSON object");
  std::string plot_path;
  app.add_option("--plot", plot_path, "write a bar chart of the speeds to this PNG (gnuplot)");
  CLI11_PARSE(app, argc, argv);
  if (pp < 0 || tg < 0 || reps < 1 || pp + tg == 0)
    throw_error(ErrorCode::kInvalidArgument, "-p and -n must be >= 0 (not both 0) and -r >= 1");
  set_num_threads(threads);
  auto model = load_model(model_path);
  SequenceEvaluator eval(*model, std::max(pp, 1) + tg, parse_kv_type(kv_type));
  const int32_t vocab = model->config().vocab_size;
  std::mt19937 rng(42);
  std::uniform_int_distribution<int32_t> pick(0, vocab - 1);
  auto rate = [&](auto&& body, int n, const char* what) {
    ProgressBar bar(what, reps + 1, "runs");
    std::vector<double> r;
    for (int i = 0; i < reps + 1; ++i, bar.advance()) {  // the first run warms caches and is dropped
      eval.reset();
      auto t0 = std::chrono::steady_clock::now();
      body();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (i > 0) r.push_back(n / s);
    }
    double mean = 0, var = 0;
    for (double x : r) mean += x / r.size();
    for (double x : r) var += (x - mean) * (x - mean) / std::max<size_t>(1, r.size() - 1);
    return std::pair{mean, std::sqrt(var)};
  };
  int64_t num_params = 0, num_bytes = 0;
  for (const auto& t : model->gguf().tensors()) {
    num_params += t.num_elements();
    num_bytes += static_cast<int64_t>(t.num_bytes);
  }
  nlohmann::json out = {{"model", model_path}, {"threads", num_threads()}, {"kv_type", kv_type},
                        {"params", num_params}, {"weight_bytes", num_bytes}};
  if (pp > 0) {
    std::vector<int32_t> prompt(pp);
    for (auto& t : prompt) t = pick(rng);
    auto [mean, sd] = rate([&] { eval.eval(prompt, /*all_logits=*/false); }, pp, "prompt processing");
    out["pp"] = {{"tokens", pp}, {"tokens_per_s", mean}, {"stddev", sd}};
  }
  if (tg > 0) {
    auto [mean, sd] = rate([&] {
      int32_t t = 1;
      for (int i = 0; i < tg; ++i) t = argmax(eval.eval(std::span<const int32_t>(&t, 1), false));
    }, tg, "generation");
    out["tg"] = {{"tokens", tg}, {"tokens_per_s", mean}, {"stddev", sd}};
  }
  if (!plot_path.empty()) write_model_plot(plot_path, out);
  if (json) {
    fmt::print("{}\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  } else {
    fmt::print("model {} | {:.2f} M params, {:.2f} MiB | threads {} | KV {}\n", model_path, num_params / 1e6,
               num_bytes / 1048576.0, num_threads(), kv_type);
    if (out.contains("pp"))
      fmt::print("pp{:<6} {:>10.1f} ± {:.1f} tokens/s\n", pp, out["pp"]["tokens_per_s"].get<double>(),
                 out["pp"]["stddev"].get<double>());
    if (out.contains("tg"))
      fmt::print("tg{:<6} {:>10.1f} ± {:.1f} tokens/s\n", tg, out["tg"]["tokens_per_s"].get<double>(),
                 out["tg"]["stddev"].get<double>());
  }
  return 0;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  const char* usage = "usage: kvlm bench (batch | model | serve | kv | constrain) [options]   (kvlm bench <kind> --help)\n";
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
  if (kind == "-h" || kind == "--help") {
    std::fputs(usage, stdout);
    return 0;
  }
  throw_error(ErrorCode::kInvalidArgument, "unknown benchmark '{}' (batch, model, serve, kv)", kind);
}

}  // namespace kvlm::apps
