// kvlm bench <kind>: benchmarks through the real engine.
//   batch — keep C requests in flight until N finish; throughput, TTFT, ITL.
//   model — forward-pass speed alone: prompt processing and generation.
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

#include "apps/commands.h"
#include "apps/engine_options.h"
#include "common/error.h"
#include "backend/threads.h"
#include "model/model.h"
#include "runner/sampler.h"
#include "runner/sequence_evaluator.h"

namespace kvlm::apps {
namespace {

struct Summary {
  double mean = 0, p50 = 0, p99 = 0;
};

Summary summarize(std::vector<double> v) {
  Summary s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / v.size();
  auto pct = [&](double p) {
    size_t i = static_cast<size_t>(std::ceil(p * v.size())) - 1;
    return v[std::min(i, v.size() - 1)];
  };
  s.p50 = pct(0.50);
  s.p99 = pct(0.99);
  return s;
}

nlohmann::json to_json(const Summary& s) { return {{"mean", s.mean}, {"p50", s.p50}, {"p99", s.p99}}; }

int bench_batch(int argc, char** argv) {
  CLI::App app{"Throughput and latency with C requests in flight until N finish", "kvlm bench batch"};
  EngineOptions eo;
  add_engine_options(app, eo);
  int num_requests = 32, concurrency = 8, prompt_len = 128, gen_len = 64, shared_prefix = 0;
  uint64_t seed = 1;
  bool json = false;
  app.add_option("--requests", num_requests, "requests in total")->capture_default_str();
  app.add_option("--concurrency", concurrency, "requests in flight")->capture_default_str();
  app.add_option("--prompt-len", prompt_len, "prompt tokens per request")->capture_default_str();
  app.add_option("--gen-len", gen_len, "generated tokens per request")->capture_default_str();
  app.add_option("--shared-prefix", shared_prefix, "leading prompt tokens shared by all requests")->capture_default_str();
  app.add_option("--seed", seed, "seed of the random prompts")->capture_default_str();
  app.add_flag("--json", json, "print one JSON object");
  CLI11_PARSE(app, argc, argv);
  if (num_requests < 1 || concurrency < 1 || prompt_len < 1 || gen_len < 1)
    throw_error(ErrorCode::kInvalidArgument, "--requests, --concurrency, --prompt-len and --gen-len must be positive");
  if (shared_prefix < 0 || shared_prefix > prompt_len)
    throw_error(ErrorCode::kInvalidArgument, "--shared-prefix must be in [0, --prompt-len]");

  auto engine = start_engine(eo);
  const int32_t vocab = engine->model().config().vocab_size;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> pick(0, vocab - 1);
  std::vector<int32_t> prefix(shared_prefix);
  for (auto& t : prefix) t = pick(rng);
  std::vector<std::vector<int32_t>> prompts(num_requests);
  for (auto& p : prompts) {
    p = prefix;
    while (static_cast<int>(p.size()) < prompt_len) p.push_back(pick(rng));
  }

  std::atomic<int> next{0};
  std::mutex mu;
  std::vector<RequestStats> stats;
  std::optional<Error> failure;
  auto t0 = std::chrono::steady_clock::now();
  auto worker = [&] {
    for (int i = next++; i < num_requests; i = next++) {
      GenerateRequest g;
      g.prompt_tokens = prompts[i];
      g.max_tokens = gen_len;
      g.ignore_eos = true;
      g.sampling.temperature = 0.f;
      try {
        auto stream = engine->submit(g);
        std::optional<Error> err;
        while (auto ev = stream->next())
          if (ev->error) err = ev->error;
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
  EngineMetrics m = engine->metrics();
  nlohmann::json out = {
      {"model", eo.model_path},
      {"requests", num_requests},
      {"concurrency", concurrency},
      {"prompt_len", prompt_len},
      {"gen_len", gen_len},
      {"shared_prefix", shared_prefix},
      {"wall_s", wall},
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
  if (json) {
    fmt::print("{}\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  } else {
    Summary t = summarize(ttft), l = summarize(itl);
    fmt::print("requests {} concurrency {} prompt {} gen {} shared prefix {}\n", num_requests, concurrency,
               prompt_len, gen_len, shared_prefix);
    fmt::print("wall {:.2f} s | prompt {:.1f} tok/s | generated {:.1f} tok/s\n", wall, prompt_tokens / wall, generated / wall);
    fmt::print("TTFT ms: mean {:.2f} p50 {:.2f} p99 {:.2f} | ITL ms: mean {:.2f} p50 {:.2f} p99 {:.2f}\n", t.mean,
               t.p50, t.p99, l.mean, l.p50, l.p99);
    fmt::print("prefix hit rate {:.3f} | peak KV blocks {} of {} | preemptions {} | steps {}\n",
               out["prefix_hit_rate"].get<double>(), m.peak_kv_blocks_used, m.num_kv_blocks, m.num_preemptions,
               m.num_steps);
  }
  return 0;
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
  CLI11_PARSE(app, argc, argv);
  if (pp < 0 || tg < 0 || reps < 1 || pp + tg == 0)
    throw_error(ErrorCode::kInvalidArgument, "-p and -n must be >= 0 (not both 0) and -r >= 1");
  set_num_threads(threads);
  auto model = Model::load(model_path);
  SequenceEvaluator eval(*model, std::max(pp, 1) + tg, parse_kv_type(kv_type));
  const int32_t vocab = model->config().vocab_size;
  std::mt19937 rng(42);
  std::uniform_int_distribution<int32_t> pick(0, vocab - 1);
  auto rate = [&](auto&& body, int n) {
    std::vector<double> r;
    for (int i = 0; i < reps + 1; ++i) {  // the first run warms caches and is dropped
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
    auto [mean, sd] = rate([&] { eval.eval(prompt, /*all_logits=*/false); }, pp);
    out["pp"] = {{"tokens", pp}, {"tokens_per_s", mean}, {"stddev", sd}};
  }
  if (tg > 0) {
    auto [mean, sd] = rate([&] {
      int32_t t = 1;
      for (int i = 0; i < tg; ++i) t = argmax(eval.eval(std::span<const int32_t>(&t, 1), false));
    }, tg);
    out["tg"] = {{"tokens", tg}, {"tokens_per_s", mean}, {"stddev", sd}};
  }
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
  const char* usage = "usage: kvlm bench (batch | model) [options]   (kvlm bench <kind> --help)\n";
  if (argc < 2) {
    std::fputs(usage, stderr);
    return 2;
  }
  std::string kind = argv[1];
  if (kind == "batch") return bench_batch(argc - 1, argv + 1);
  if (kind == "model") return bench_model(argc - 1, argv + 1);
  if (kind == "-h" || kind == "--help") {
    std::fputs(usage, stdout);
    return 0;
  }
  throw_error(ErrorCode::kInvalidArgument, "unknown benchmark '{}' (batch, model)", kind);
}

}  // namespace kvlm::apps
