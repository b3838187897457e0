// kvlm bench serve: drives any OpenAI-compatible server (kvlm serve,
// llama-server, vLLM) over HTTP with streaming completions and reports what
// its clients see: throughput, TTFT, inter-token latency, end-to-end
// latency, errors; with --sweep one run per concurrency, with --plot a PNG.
// --workload multi-tenant sends tenants' multi-turn conversations instead
// (multi_tenant_load.h) and reports how much of their prompts the server's
// prefix cache served.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "apps/bench_stats.h"
#include "apps/cli_parse.h"
#include "apps/commands.h"
#include "apps/multi_tenant_load.h"
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

// Prompt tokens and those the prefix cache served, over the completed
// requests whose slot `take` picks; the hit ratio is null where the server
// reported no cached_tokens, or no prompt tokens.
Json prefix_split(const LoadResult& r, const std::function<bool(size_t)>& take) {
  int64_t prompt_tokens = 0, cached_tokens = 0;
  int num_ok = 0;
  bool reported = false;
  std::vector<double> ttft;
  for (size_t i = 0; i < r.requests.size(); ++i) {
    const RequestResult& q = r.requests[i];
    if (!q.ok || !take(i)) continue;
    ++num_ok;
    ttft.push_back(q.ttft_s * 1e3);
    prompt_tokens += q.num_prompt_tokens;
    reported = reported || q.num_cached_tokens.has_value();
    cached_tokens += q.num_cached_tokens.value_or(0);
  }
  const bool known = reported && prompt_tokens > 0;
  return {{"completed", num_ok},
          {"prompt_tokens", prompt_tokens},
          {"cached_tokens", reported ? Json(cached_tokens) : Json(nullptr)},
          {"prefix_hit_ratio", known ? Json(static_cast<double>(cached_tokens) / prompt_tokens) : Json(nullptr)},
          {"ttft_ms", to_json(summarize(ttft))}};
}

// report() and how the prefix cache served the conversations: in all, on
// first turns (the tenant's system prompt at most) and on follow-ups (their
// own history too).
Json multi_tenant_report(const LoadResult& r, const LoadOptions& o, const MultiTenantSource& source) {
  Json run = report(r, o);
  const Json all = prefix_split(r, [](size_t) { return true; });
  run["cached_tokens"] = all["cached_tokens"];
  run["prefix_hit_ratio"] = all["prefix_hit_ratio"];
  run["first_turns"] = prefix_split(r, [&](size_t i) { return source.turn_of(i) == 1; });
  run["follow_up_turns"] = prefix_split(r, [&](size_t i) { return source.turn_of(i) > 1; });
  return run;
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

constexpr const char* kMultiTenant = "multi-tenant";

// What the command line asks for, beyond one run's LoadOptions.
struct ServeBench {
  LoadOptions load;
  std::string workload = "single-turn";
  int prompt_len = 128, shared_prefix = 0;  // tokens (single-turn)
  std::string dataset, plot_path;
  // Where POST /tokenize sizes prompts in tokens (default: url): a worker's,
  // when the server under test is a router that has no tokenizer of its own
  // (SGLang's gateway without one registered answers it with an error).
  std::string tokenize_url;
  std::vector<int> sweep;
  int num_tenants = 0, num_users = 0, num_turns = 3;  // multi-tenant
  int system_len = 0, user_len = 32;                  // tokens (multi-tenant)
  bool json = false;
};

// Lengths are asked in tokens; prompts are made of words. Where the server
// can count (POST /tokenize), words are scaled to hit the token counts.
struct WordScale {
  std::optional<double> tokens_per_word;  // nullopt: 1 word = 1 token

  int words_for(int num_tokens) const {
    return tokens_per_word ? static_cast<int>(std::lround(num_tokens / *tokens_per_word)) : num_tokens;
  }
  Json to_json() const { return tokens_per_word ? Json(*tokens_per_word) : Json(nullptr); }
};

// Asks the server (or --tokenize-url's) to count a sample of the words prompts are made of.
WordScale measure_words(const ServeBench& b, const std::string& dataset) {
  LoadOptions counter = b.load;
  if (!b.tokenize_url.empty()) counter.url = b.tokenize_url;
  return {tokens_per_word(counter, make_prompts(1, 256, 0, dataset, b.load.seed)[0])};
}

std::string counted_by(const Json& info) {
  return info["tokens_per_word"].is_null()
             ? "no /tokenize: 1 word = 1 token"
             : fmt::format("{:.2f} tokens/word by the server's /tokenize", info["tokens_per_word"].get<double>());
}

// The prompts, and how their lengths were chosen (JSON fields of the report).
std::vector<std::string> build_prompts(const ServeBench& b, Json& info) {
  const LoadOptions& o = b.load;
  const WordScale scale = measure_words(b, b.dataset);
  const int num_words = std::max(1, scale.words_for(b.prompt_len));
  const int num_shared_words = std::min(num_words, scale.words_for(b.shared_prefix));
  info = {{"url", o.url},
          {"model", o.model},
          {"prompt_len", b.prompt_len},
          {"gen_len", o.gen_len},
          {"shared_prefix", b.shared_prefix},
          {"prompt_words", num_words},
          {"shared_prefix_words", num_shared_words},
          {"tokens_per_word", scale.to_json()}};
  return make_prompts(o.num_requests, num_words, num_shared_words, b.dataset, o.seed);
}

void print_header(const Json& info, int num_requests) {
  fmt::print("{} | model {} | {} requests per run | prompt {} words (shared {}; {}) | gen {} tokens\n",
             info["url"].get<std::string>(), info["model"].get<std::string>(), num_requests,
             info["prompt_words"].get<int>(), info["shared_prefix_words"].get<int>(), counted_by(info),
             info["gen_len"].get<int>());
}

// The conversations' shape in words, and what it was asked in tokens (JSON fields of the report).
MultiTenantShape build_shape(const ServeBench& b, Json& info) {
  const LoadOptions& o = b.load;
  const WordScale scale = measure_words(b, "");
  const MultiTenantShape shape{b.num_tenants, b.num_users, b.num_turns,
                               b.system_len > 0 ? std::max(1, scale.words_for(b.system_len)) : 0,
                               std::max(1, scale.words_for(b.user_len))};
  info = {{"url", o.url},
          {"model", o.model},
          {"workload", kMultiTenant},
          {"tenants", b.num_tenants},
          {"users", b.num_users},
          {"turns", b.num_turns},
          {"system_len", b.system_len},
          {"user_len", b.user_len},
          {"gen_len", o.gen_len},
          // The system prompt, every message and every answer but the last: to check against the context.
          {"last_turn_prompt_len", b.system_len + b.num_turns * b.user_len + (b.num_turns - 1) * o.gen_len},
          {"system_words", shape.system_words},
          {"user_words", shape.user_words},
          {"tokens_per_word", scale.to_json()}};
  return shape;
}

void print_multi_tenant(const Json& info, const Json& run) {
  fmt::print("{} | model {} | {} tenants x {} users x {} turns | system {} words, messages {} words ({}) | "
             "last turn ~{} tokens | gen {} tokens\n",
             info["url"].get<std::string>(), info["model"].get<std::string>(), info["tenants"].get<int>(),
             info["users"].get<int>(), info["turns"].get<int>(), info["system_words"].get<int>(),
             info["user_words"].get<int>(), counted_by(info), info["last_turn_prompt_len"].get<int>(),
             info["gen_len"].get<int>());
  print_table({run});
  const auto ratio = [](const Json& r) {
    return r["prefix_hit_ratio"].is_null() ? std::string("n/a") : fmt::format("{:.3f}", r["prefix_hit_ratio"].get<double>());
  };
  if (run["cached_tokens"].is_null()) {
    fmt::print("prefix cache: the server reports no usage.prompt_tokens_details.cached_tokens\n");
    return;
  }
  fmt::print("prefix cache hit ratio {}: {} of {} prompt tokens cached (first turns {}, follow-up turns {})\n",
             ratio(run), run["cached_tokens"].get<int64_t>(), run["prompt_tokens"].get<int64_t>(),
             ratio(run["first_turns"]), ratio(run["follow_up_turns"]));
}

// One request first, as a check and to warm the server up; not counted.
void warm_up(const LoadOptions& o, const std::string& prompt) {
  if (const RequestResult warm = run_load(o, {prompt}).requests[0]; !warm.ok)
    throw_error(ErrorCode::kUnavailable, "the first request to {} failed: {}", o.url, warm.error);
}

// The options that belong to one workload, to refuse them under the other.
struct WorkloadOptions {
  std::vector<CLI::Option*> single_turn, multi_tenant;
  std::vector<CLI::Option*> multi_tenant_required;  // --tenants, --system-len, --users
};

void add_multi_tenant_options(CLI::App& app, ServeBench& b, WorkloadOptions& w) {
  app.add_option("--workload", b.workload,
                 "single-turn: independent prompts; multi-tenant: tenants' users in multi-turn conversations "
                 "(prefix cache hits reported)")
      ->check(CLI::IsMember({"single-turn", kMultiTenant}))
      ->capture_default_str();
  w.multi_tenant_required = {
      app.add_option("--tenants", b.num_tenants, "multi-tenant: tenants, each with its own system prompt"),
      app.add_option("--system-len", b.system_len, "multi-tenant: tokens of each tenant's system prompt"),
      app.add_option("--users", b.num_users, "multi-tenant: users per tenant, each one conversation")};
  w.multi_tenant = w.multi_tenant_required;
  w.multi_tenant.push_back(
      app.add_option("--turns", b.num_turns, "multi-tenant: turns per conversation")->capture_default_str());
  w.multi_tenant.push_back(
      app.add_option("--user-len", b.user_len, "multi-tenant: tokens of each user message")->capture_default_str());
}

void check_single_turn(const ServeBench& b) {
  const LoadOptions& o = b.load;
  if (o.num_requests < 1 || b.prompt_len < 1)
    throw_error(ErrorCode::kInvalidArgument, "--requests and --prompt-len must be positive");
  if (b.shared_prefix < 0 || b.shared_prefix > b.prompt_len)
    throw_error(ErrorCode::kInvalidArgument, "--shared-prefix must be in [0, --prompt-len]");
  if (o.rate > 0 && !b.plot_path.empty())
    throw_error(ErrorCode::kInvalidArgument, "--plot draws against concurrency: use --concurrency or --sweep, not --rate");
}

void check_multi_tenant(const ServeBench& b, const WorkloadOptions& w) {
  for (const CLI::Option* opt : w.single_turn)
    if (opt->count() > 0)
      throw_error(ErrorCode::kInvalidArgument,
                  "{} is for the single-turn workload; --workload multi-tenant sends tenants x users x turns "
                  "requests once",
                  opt->get_name());
  for (const CLI::Option* opt : w.multi_tenant_required)
    if (opt->count() == 0)
      throw_error(ErrorCode::kInvalidArgument, "--workload multi-tenant needs --tenants, --system-len and --users");
  if (b.num_tenants < 1 || b.num_users < 1 || b.num_turns < 1 || b.user_len < 1)
    throw_error(ErrorCode::kInvalidArgument, "--tenants, --users, --turns and --user-len must be positive");
  if (b.system_len < 0) throw_error(ErrorCode::kInvalidArgument, "--system-len must be >= 0");
}

// Checks what parse_args read; throws Error(kInvalidArgument) saying which flag is wrong.
void check_args(ServeBench& b, const WorkloadOptions& w) {
  const LoadOptions& o = b.load;
  if (o.concurrency < 1 || o.gen_len < 1 || o.rate < 0)
    throw_error(ErrorCode::kInvalidArgument, "--concurrency and --gen-len must be positive, --rate not negative");
  if (b.workload == kMultiTenant) return check_multi_tenant(b, w);
  for (const CLI::Option* opt : w.multi_tenant)
    if (opt->count() > 0) throw_error(ErrorCode::kInvalidArgument, "{} needs --workload multi-tenant", opt->get_name());
  check_single_turn(b);
  for (int c : b.sweep)
    if (c < 1) throw_error(ErrorCode::kInvalidArgument, "--sweep takes positive concurrencies, got {}", c);
  if (b.sweep.empty()) b.sweep = {o.concurrency};
}

// Fills `b`; returns an exit code when the command should end here (--help, a
// parse error, KVLM_PARSE_ONLY=1: apps/cli_parse.h).
std::optional<int> parse_args(int argc, char** argv, ServeBench& b) {
  CLI::App app{"Streaming /v1/completions load against an OpenAI-compatible server", "kvlm bench serve"};
  LoadOptions& o = b.load;
  WorkloadOptions w;
  app.add_option("--url", o.url, "server base URL, e.g. http://127.0.0.1:8080")->required();
  app.add_option("--api-key", o.api_key, "sent as 'Authorization: Bearer KEY'");
  app.add_option("--model", o.model, "model name to request (default: the first of /v1/models)");
  app.add_option("--tokenize-url", b.tokenize_url,
                 "server whose POST /tokenize sizes the prompts (default: --url; a worker's behind a router that "
                 "has no tokenizer)");
  auto* conc = app.add_option("--concurrency", o.concurrency, "requests in flight (closed loop)")->capture_default_str();
  auto* rate = app.add_option("--rate", o.rate,
                              "requests per second, Poisson arrivals (open loop; multi-tenant: an arrival that "
                              "finds no turn ready waits for one)");
  app.add_option("--gen-len", o.gen_len, "tokens to generate per request (ignore_eos)")->capture_default_str();
  w.single_turn = {
      app.add_option("--requests", o.num_requests, "requests per run")->capture_default_str(),
      app.add_option("--prompt-len", b.prompt_len,
                     "prompt tokens (as words, scaled by the server's /tokenize if it has one)")
          ->capture_default_str(),
      app.add_option("--shared-prefix", b.shared_prefix, "leading prompt tokens shared by all requests")
          ->capture_default_str(),
      app.add_option("--dataset", b.dataset, "text file whose lines make the prompts"),
      app.add_option("--sweep", b.sweep, "one run per concurrency, e.g. 1,2,4,8,16")->delimiter(','),
      app.add_option("--plot", b.plot_path, "write throughput and latency against concurrency to this PNG (gnuplot)")};
  add_multi_tenant_options(app, b, w);
  app.add_option("--timeout", o.timeout_s, "seconds a request may take")->capture_default_str();
  app.add_option("--seed", o.seed, "seed of the prompts and arrival times")->capture_default_str();
  app.add_flag("--json", b.json, "print one JSON object");
  conc->excludes(rate);
  app.get_option("--sweep")->excludes(rate);
  KVLM_PARSE(app, argc, argv);
  check_args(b, w);
  return std::nullopt;
}

// --workload multi-tenant: one run of every conversation.
void bench_multi_tenant(const ServeBench& b) {
  const LoadOptions& o = b.load;
  Json info;
  const MultiTenantShape shape = build_shape(b, info);
  // Text of no tenant's: the warm-up leaves nothing in the prefix cache that a turn could hit.
  warm_up(o, "kvlm bench serve warm-up request");
  MultiTenantSource source(shape, o.seed);
  const Json run = multi_tenant_report(run_load(o, source), o, source);
  if (b.json) {
    info["runs"] = Json::array({run});
    fmt::print("{}\n", info.dump());
  } else {
    print_multi_tenant(info, run);
  }
}

}  // namespace

int bench_serve(int argc, char** argv) {
  ServeBench b;
  if (const auto code = parse_args(argc, argv, b)) return *code;
  LoadOptions& o = b.load;
  if (o.model.empty()) o.model = first_model(o);
  if (b.workload == kMultiTenant) {
    bench_multi_tenant(b);
    return 0;
  }
  Json info;
  const auto prompts = build_prompts(b, info);
  warm_up(o, prompts[0]);
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
