// kvlm bench serve: drives any OpenAI-compatible server (kvlm serve,
// llama-server, vLLM) over HTTP with streaming completions and reports what
// its clients see: throughput, TTFT, inter-token latency, end-to-end
// latency, errors; with --sweep one run per concurrency, with --plot a PNG.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "apps/bench_stats.h"
#include "apps/commands.h"
#include "apps/plot.h"
#include "apps/serve_load.h"
#include "common/error.h"

namespace kvlm::apps {
namespace {

using Json = nlohmann::json;

// One run's report; concurrency is null for an open-loop (--rate) run.
Json report(const LoadResult& r, const LoadOptions& o) {
  std::vector<double> ttft, itl, e2e;
  int64_t prompt_tokens = 0, generated = 0;
  int num_ok = 0;
  std::map<std::string, int> errors;
  for (const RequestResult& q : r.requests) {
    if (!q.ok) {
      ++errors[q.error];
      continue;
    }
    ++num_ok;
    ttft.push_back(q.ttft_s * 1e3);
    e2e.push_back(q.e2e_s * 1e3);
    for (double x : q.itl_s) itl.push_back(x * 1e3);
    prompt_tokens += q.num_prompt_tokens;
    generated += q.num_generated_tokens;
  }
  Json messages = Json::object();
  for (const auto& [msg, n] : errors) messages[msg] = n;
  const double wall = std::max(r.wall_s, 1e-9);
  return {{"concurrency", o.rate > 0 ? Json(nullptr) : Json(o.concurrency)},
          {"rate", o.rate > 0 ? Json(o.rate) : Json(nullptr)},
          {"requests", r.requests.size()},
          {"completed", num_ok},
          {"errors", static_cast<int>(r.requests.size()) - num_ok},
          {"error_messages", messages},
          {"wall_s", r.wall_s},
          {"requests_per_s", num_ok / wall},
          {"prompt_tokens", prompt_tokens},
          {"generated_tokens", generated},
          {"generated_tokens_per_s", generated / wall},
          {"ttft_ms", to_json(summarize(ttft))},
          {"itl_ms", to_json(summarize(itl))},
          {"e2e_ms", to_json(summarize(e2e))}};
}

std::string triple(const Json& s) {
  return fmt::format("{:.1f}/{:.1f}/{:.1f}/{:.1f}", s["mean"].get<double>(), s["p50"].get<double>(),
                     s["p90"].get<double>(), s["p99"].get<double>());
}

void print_table(const std::vector<Json>& runs) {
  fmt::print("{:>6} {:>5} {:>5} {:>8} {:>10}  {:>27}  {:>23}  {:>27}\n", "conc", "reqs", "errs", "req/s", "gen tok/s",
             "TTFT ms mean/p50/p90/p99", "ITL ms mean/p50/p90/p99", "E2E ms mean/p50/p90/p99");
  for (const Json& r : runs) {
    const std::string conc = r["concurrency"].is_null() ? fmt::format("{}/s", r["rate"].get<double>())
                                                        : std::to_string(r["concurrency"].get<int>());
    fmt::print("{:>6} {:>5} {:>5} {:>8.2f} {:>10.1f}  {:>27}  {:>23}  {:>27}\n", conc, r["requests"].get<int>(),
               r["errors"].get<int>(), r["requests_per_s"].get<double>(), r["generated_tokens_per_s"].get<double>(),
               triple(r["ttft_ms"]), triple(r["itl_ms"]), triple(r["e2e_ms"]));
    for (const auto& [msg, n] : r["error_messages"].items()) fmt::print(stderr, "  {} x {}\n", n.get<int>(), msg);
  }
}

LoadPoint point_of(const Json& r) {
  return {r["concurrency"].is_null() ? 0.0 : r["concurrency"].get<double>(), r["requests_per_s"].get<double>(),
          r["generated_tokens_per_s"].get<double>(), r["ttft_ms"]["p50"].get<double>(),
          r["itl_ms"]["p50"].get<double>(), r["e2e_ms"]["p50"].get<double>()};
}

// What the command line asks for, beyond one run's LoadOptions.
struct ServeBench {
  LoadOptions load;
  int prompt_len = 128, shared_prefix = 0;  // tokens
  std::string dataset, plot_path;
  std::vector<int> sweep;
  bool json = false;
};

// The prompts, and how their lengths were chosen (JSON fields of the report).
std::vector<std::string> build_prompts(const ServeBench& b, Json& info) {
  // Lengths are asked in tokens; prompts are made of words. Where the server
  // can count (POST /tokenize), scale the words to hit the token counts.
  const LoadOptions& o = b.load;
  const std::optional<double> ratio = tokens_per_word(o, make_prompts(1, 256, 0, b.dataset, o.seed)[0]);
  const auto words_for = [&](int tokens) { return ratio ? static_cast<int>(std::lround(tokens / *ratio)) : tokens; };
  const int num_words = std::max(1, words_for(b.prompt_len));
  const int num_shared_words = std::min(num_words, words_for(b.shared_prefix));
  info = {{"url", o.url},
          {"model", o.model},
          {"prompt_len", b.prompt_len},
          {"gen_len", o.gen_len},
          {"shared_prefix", b.shared_prefix},
          {"prompt_words", num_words},
          {"shared_prefix_words", num_shared_words},
          {"tokens_per_word", ratio ? Json(*ratio) : Json(nullptr)}};
  return make_prompts(o.num_requests, num_words, num_shared_words, b.dataset, o.seed);
}

void print_header(const Json& info, int num_requests) {
  const std::string counted = info["tokens_per_word"].is_null()
                                  ? "no /tokenize: 1 word = 1 token"
                                  : fmt::format("{:.2f} tokens/word by the server's /tokenize",
                                                info["tokens_per_word"].get<double>());
  fmt::print("{} | model {} | {} requests per run | prompt {} words (shared {}; {}) | gen {} tokens\n",
             info["url"].get<std::string>(), info["model"].get<std::string>(), num_requests,
             info["prompt_words"].get<int>(), info["shared_prefix_words"].get<int>(), counted, info["gen_len"].get<int>());
}

// Fills `b`; returns an exit code when the command should end here (--help, a parse error).
std::optional<int> parse_args(int argc, char** argv, ServeBench& b) {
  CLI::App app{"Streaming /v1/completions load against an OpenAI-compatible server", "kvlm bench serve"};
  LoadOptions& o = b.load;
  app.add_option("--url", o.url, "server base URL, e.g. http://127.0.0.1:8080")->required();
  app.add_option("--api-key", o.api_key, "sent as 'Authorization: Bearer KEY'");
  app.add_option("--model", o.model, "model name to request (default: the first of /v1/models)");
  app.add_option("--requests", o.num_requests, "requests per run")->capture_default_str();
  auto* conc = app.add_option("--concurrency", o.concurrency, "requests in flight (closed loop)")->capture_default_str();
  auto* rate = app.add_option("--rate", o.rate, "requests per second, Poisson arrivals (open loop)");
  app.add_option("--prompt-len", b.prompt_len, "prompt tokens (as words, scaled by the server's /tokenize if it has one)")
      ->capture_default_str();
  app.add_option("--gen-len", o.gen_len, "tokens to generate per request (ignore_eos)")->capture_default_str();
  app.add_option("--shared-prefix", b.shared_prefix, "leading prompt tokens shared by all requests")->capture_default_str();
  app.add_option("--dataset", b.dataset, "text file whose lines make the prompts");
  auto* sw = app.add_option("--sweep", b.sweep, "one run per concurrency, e.g. 1,2,4,8,16")->delimiter(',');
  app.add_option("--plot", b.plot_path, "write throughput and latency against concurrency to this PNG (gnuplot)");
  app.add_option("--timeout", o.timeout_s, "seconds a request may take")->capture_default_str();
  app.add_option("--seed", o.seed, "seed of the prompts and arrival times")->capture_default_str();
  app.add_flag("--json", b.json, "print one JSON object");
  conc->excludes(rate);
  sw->excludes(rate);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);  // prints the help or the error
  }
  if (o.num_requests < 1 || o.concurrency < 1 || b.prompt_len < 1 || o.gen_len < 1 || o.rate < 0)
    throw_error(ErrorCode::kInvalidArgument, "--requests, --concurrency, --prompt-len and --gen-len must be positive");
  if (b.shared_prefix < 0 || b.shared_prefix > b.prompt_len)
    throw_error(ErrorCode::kInvalidArgument, "--shared-prefix must be in [0, --prompt-len]");
  for (int c : b.sweep)
    if (c < 1) throw_error(ErrorCode::kInvalidArgument, "--sweep takes positive concurrencies, got {}", c);
  if (b.sweep.empty()) b.sweep = {o.concurrency};
  if (o.rate > 0 && !b.plot_path.empty())
    throw_error(ErrorCode::kInvalidArgument, "--plot draws against concurrency: use --concurrency or --sweep, not --rate");
  return std::nullopt;
}

}  // namespace

int bench_serve(int argc, char** argv) {
  ServeBench b;
  if (const auto code = parse_args(argc, argv, b)) return *code;
  LoadOptions& o = b.load;
  if (o.model.empty()) o.model = first_model(o);
  Json info;
  const auto prompts = build_prompts(b, info);
  // One request first, as a check and to warm the server up; not counted.
  if (const RequestResult warm = run_load(o, {prompts[0]}).requests[0]; !warm.ok)
    throw_error(ErrorCode::kUnavailable, "the first request to {} failed: {}", o.url, warm.error);
  std::vector<Json> runs;
  for (int c : b.sweep) {
    o.concurrency = c;
    runs.push_back(report(run_load(o, prompts), o));
  }
  if (!b.plot_path.empty()) {
    std::vector<LoadPoint> points;
    for (const Json& r : runs) points.push_back(point_of(r));
    write_load_plot(b.plot_path,
                    fmt::format("kvlm bench serve: {} ({} requests, prompt ~{} tokens, gen {} tokens)",
                                o.model.empty() ? o.url : o.model, o.num_requests, b.prompt_len, o.gen_len),
                    points);
  }
  if (b.json) {
    info["runs"] = runs;
    fmt::print("{}\n", info.dump());
  } else {
    print_header(info, o.num_requests);
    print_table(runs);
  }
  return 0;
}

}  // namespace kvlm::apps
