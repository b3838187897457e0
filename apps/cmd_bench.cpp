// kvlm bench <kind>: benchmarks through the real engine.
//   batch — keep C requests in flight until N finish; throughput, TTFT, ITL.
#include <algorithm>
#include <atomic>
#include <chrono>
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
#include "model/model.h"

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
    fmt::print("{}\n", out.dump());
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

}  // namespace

int cmd_bench(int argc, char** argv) {
  const char* usage = "usage: kvlm bench batch [options]   (kvlm bench batch --help)\n";
  if (argc < 2) {
    std::fputs(usage, stderr);
    return 2;
  }
  std::string kind = argv[1];
  if (kind == "batch") return bench_batch(argc - 1, argv + 1);
  if (kind == "-h" || kind == "--help") {
    std::fputs(usage, stdout);
    return 0;
  }
  throw_error(ErrorCode::kInvalidArgument, "unknown benchmark '{}' (batch)", kind);
}

}  // namespace kvlm::apps
