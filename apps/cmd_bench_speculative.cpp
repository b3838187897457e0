// kvlm bench speculative: what verifying proposals in the batched step buys,
// measured apart from any proposer. A first pass records the model's own
// greedy continuation of each stream's prompt; then, for each acceptance a,
// a ReplayProposer proposes that continuation with each token corrupted with
// probability 1 - a, and the same requests run with and without speculation
// (alternated, so both see the same machine load). Greedy output must not
// change: each row says whether it was identical.
//
// With --draft-model FILE the proposer is that draft model (on the random
// prompts, or with --text on the stories), and the row reports its measured
// acceptance and speed against no speculation.
//
// With --text FILE the proposer is the real one (n-gram prompt lookup) on a
// trained model: the prompts are the file's stories (their first paragraph;
// --quote: two paragraphs, a blank line and the story's first sentence again,
// so the output may quote the prompt), and the row reports the acceptance
// measured.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "apps/cli_parse.h"
#include "apps/commands.h"
#include "apps/model_loading.h"
#include "common/error.h"
#include "engine/spec/draft_proposer.h"
#include "engine/engine.h"
#include "engine/spec/speculative.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace kvlm::apps {
namespace {

using Clock = std::chrono::steady_clock;

struct Run {
  std::vector<std::vector<int32_t>> outputs;  // [stream] generated tokens
  double tokens_per_s = 0;
  // Tokens per second of this process's CPU time (every thread): on a
  // machine loaded by others, steadier than the wall clock.
  double tokens_per_cpu_s = 0;
  EngineMetrics metrics;
};

double process_cpu_s() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

struct BenchFlags {
  std::string model_path;
  int threads = 0, streams = 1, num_prompt = 32, num_gen = 64, spec_tokens = 0, reps = 1;
  std::vector<double> acceptance = {1, 0.7, 0.3, 0};
  bool json = false;
  std::string text_path;  // --text: n-gram on the stories of this file
  bool quote = false;
  std::string draft_path;  // --draft-model: this model proposes
};

std::vector<GenerateRequest> make_requests(const BenchFlags& f, int32_t vocab) {
  std::mt19937 rng(1234);
  std::vector<GenerateRequest> out;
  for (int s = 0; s < f.streams; ++s) {
    GenerateRequest g;
    g.prompt_tokens.push_back(1);
    while (static_cast<int>(g.prompt_tokens.size()) < f.num_prompt)
      g.prompt_tokens.push_back(3 + static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab - 3)));
    g.max_tokens = f.num_gen;
    g.ignore_eos = true;
    g.sampling.temperature = 0.f;
    out.push_back(std::move(g));
  }
  return out;
}

// The file's stories (each begins "Once upon a time"), one prompt each.
std::vector<GenerateRequest> story_requests(const BenchFlags& f, const Tokenizer& tok) {
  std::ifstream in(f.text_path);
  if (!in) throw_error(ErrorCode::kNotFound, "cannot read --text {}", f.text_path);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  std::vector<GenerateRequest> out;
  const std::string start = "Once upon a time";
  for (size_t at = text.find(start); at != std::string::npos && static_cast<int>(out.size()) < f.streams;) {
    const size_t next = text.find(start, at + 1);
    const std::string story = text.substr(at, next == std::string::npos ? std::string::npos : next - at);
    at = next;
    const size_t para = story.find("\n\n");
    std::string prompt = story.substr(0, para);
    if (f.quote) {
      const size_t second = para == std::string::npos ? para : story.find("\n\n", para + 2);
      prompt = story.substr(0, second) + "\n\n" + story.substr(0, story.find(". ") + 1);
    }
    GenerateRequest g;
    g.prompt_tokens = tok.encode(prompt, true, false);
    if (static_cast<int>(g.prompt_tokens.size()) > 400) continue;
    g.max_tokens = f.num_gen;
    g.ignore_eos = true;
    g.sampling.temperature = 0.f;
    out.push_back(std::move(g));
  }
  if (out.empty()) throw_error(ErrorCode::kInvalidArgument, "--text {}: no story begins 'Once upon a time'", f.text_path);
  return out;
}

// Every stream at once; tokens/s over the wall time of the whole batch.
Run run(const BenchFlags& f, const std::vector<GenerateRequest>& requests, std::shared_ptr<Proposer> proposer,
        bool speculate = false) {
  EngineConfig c;
  c.num_threads = f.threads;
  int32_t num_tokens_max = 0;
  for (const GenerateRequest& g : requests) num_tokens_max += static_cast<int32_t>(g.prompt_tokens.size()) + f.num_gen + 16;
  c.kv_tokens = num_tokens_max;
  c.speculative.proposer = std::move(proposer);
  c.speculative.num_spec_tokens = f.spec_tokens;
  if (!c.speculative.proposer && !f.text_path.empty() && speculate) c.speculative.mode = SpeculateMode::kNgram;
  auto model = load_model(f.model_path);
  auto tok = Tokenizer::from_metadata(model->gguf().metadata());
  Engine engine(std::move(model), std::move(tok), c);
  const auto t0 = Clock::now();
  const double cpu0 = process_cpu_s();
  // --text: one story after another (single-stream latency); else all at once.
  std::vector<std::shared_ptr<RequestStream>> streams;
  if (f.text_path.empty())
    for (const GenerateRequest& g : requests) streams.push_back(engine.submit(g));
  Run r;
  int64_t num_tokens = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (!f.text_path.empty()) streams.push_back(engine.submit(requests[i]));
    RequestStream& s = *streams[i];
    r.outputs.emplace_back();
    while (auto ev = s.next()) {
      if (ev->error) throw *ev->error;
      r.outputs.back().insert(r.outputs.back().end(), ev->tokens.begin(), ev->tokens.end());
    }
    num_tokens += static_cast<int64_t>(r.outputs.back().size());
  }
  r.tokens_per_s = static_cast<double>(num_tokens) / std::chrono::duration<double>(Clock::now() - t0).count();
  r.tokens_per_cpu_s = static_cast<double>(num_tokens) / (process_cpu_s() - cpu0);
  r.metrics = engine.metrics();
  return r;
}

int bench_ngram(const BenchFlags& f) {
  auto model = load_model(f.model_path);
  const std::vector<GenerateRequest> requests = story_requests(f, *Tokenizer::from_metadata(model->gguf().metadata()));
  const Run warm = run(f, requests, nullptr);
  const Run off = run(f, requests, nullptr);
  const Run on = run(f, requests, nullptr, true);
  const EngineMetrics& m = on.metrics;
  const double acceptance = m.num_spec_proposed ? static_cast<double>(m.num_spec_accepted) / m.num_spec_proposed : 0;
  const nlohmann::json row = {
      {"proposer", "ngram"},         {"workload", f.quote ? "quote" : "stories"},
      {"prompts", requests.size()},  {"measured_acceptance", acceptance},
      {"proposed", m.num_spec_proposed}, {"accepted", m.num_spec_accepted},
      {"tokens_per_step", m.num_steps ? static_cast<double>(m.num_generated_tokens) / m.num_steps : 0.0},
      {"tokens_per_s", on.tokens_per_s}, {"baseline_tokens_per_s", off.tokens_per_s},
      {"speedup", on.tokens_per_s / off.tokens_per_s},
      {"cpu_speedup", on.tokens_per_cpu_s / off.tokens_per_cpu_s},
      {"identical", on.outputs == warm.outputs && off.outputs == warm.outputs}};
  if (f.json) {
    fmt::print("{}\n", nlohmann::json{{"model", f.model_path}, {"threads", f.threads}, {"spec_tokens", f.spec_tokens},
                                      {"results", nlohmann::json::array({row})}}.dump(2));
  } else {
    fmt::print("ngram on {} {} prompts: acceptance {:.3f} ({}/{}), {:.2f} tok/s vs {:.2f} off ({:.2f}x), identical {}\n",
               requests.size(), f.quote ? "quote" : "story", acceptance, m.num_spec_accepted, m.num_spec_proposed,
               on.tokens_per_s, off.tokens_per_s, on.tokens_per_s / off.tokens_per_s, row["identical"].get<bool>());
  }
  return 0;
}

// --draft-model: the draft proposes for the random prompts (all streams at
// once) or, with --text, for the stories (one after another); the same
// requests run without proposals, alternated, the fastest of -r counting.
int bench_draft(const BenchFlags& f) {
  auto target = load_model(f.model_path);
  const std::vector<GenerateRequest> requests =
      f.text_path.empty() ? make_requests(f, target->config().vocab_size)
                          : story_requests(f, *Tokenizer::from_metadata(target->gguf().metadata()));
  std::shared_ptr<Proposer> draft =
      DraftProposer::create(load_model(f.draft_path), *target, f.draft_path, f.model_path, DraftProposerConfig{});
  const Run reference = run(f, requests, nullptr);  // and a warm-up
  Run off, on;
  for (int i = 0; i < f.reps; ++i) {
    Run a = run(f, requests, nullptr), b = run(f, requests, draft);
    if (a.tokens_per_s > off.tokens_per_s) off = std::move(a);
    if (b.tokens_per_s > on.tokens_per_s) on = std::move(b);
  }
  const EngineMetrics& m = on.metrics;
  const double acceptance = m.num_spec_proposed ? static_cast<double>(m.num_spec_accepted) / m.num_spec_proposed : 0;
  const nlohmann::json row = {
      {"proposer", "draft"}, {"draft_model", f.draft_path},
      {"workload", f.text_path.empty() ? "random" : "stories"}, {"prompts", requests.size()},
      {"measured_acceptance", acceptance}, {"proposed", m.num_spec_proposed}, {"accepted", m.num_spec_accepted},
      {"steps", m.num_steps}, {"baseline_steps", off.metrics.num_steps},
      {"propose_share", m.step_times.total_s() > 0 ? m.spec_propose_s / m.step_times.total_s() : 0.0},
      {"tokens_per_s", on.tokens_per_s}, {"baseline_tokens_per_s", off.tokens_per_s},
      {"speedup", on.tokens_per_s / off.tokens_per_s}, {"cpu_speedup", on.tokens_per_cpu_s / off.tokens_per_cpu_s},
      {"identical", on.outputs == reference.outputs && off.outputs == reference.outputs}};
  if (f.json) {
    fmt::print("{}\n", nlohmann::json{{"model", f.model_path}, {"threads", f.threads}, {"spec_tokens", f.spec_tokens},
                                      {"results", nlohmann::json::array({row})}}.dump(2));
  } else {
    fmt::print("draft {} on {} prompts: acceptance {:.3f} ({}/{}), steps {} vs {}, drafting {:.0f}% of step time, "
               "{:.2f} tok/s vs {:.2f} off ({:.2f}x; per CPU second {:.2f}x), identical {}\n",
               f.draft_path, requests.size(), acceptance, m.num_spec_accepted, m.num_spec_proposed, m.num_steps,
               off.metrics.num_steps, 100 * row["propose_share"].get<double>(), on.tokens_per_s, off.tokens_per_s,
               on.tokens_per_s / off.tokens_per_s, on.tokens_per_cpu_s / off.tokens_per_cpu_s,
               row["identical"].get<bool>());
  }
  return 0;
}

}  // namespace

int bench_speculative(int argc, char** argv) {
  CLI::App app{"Speculative decoding's mechanism with a replay proposer of known acceptance", "kvlm bench speculative"};
  BenchFlags f;
  app.add_option("-m,--model", f.model_path, "GGUF model file")->required();
  app.add_option("-t,--threads", f.threads, "compute threads (default: all cores)");
  app.add_option("--acceptance", f.acceptance, "fractions of proposals left right, comma-separated")
      ->delimiter(',')->capture_default_str();
  app.add_option("--spec-tokens", f.spec_tokens, "proposals per step (0: adaptive)")->capture_default_str();
  app.add_option("--streams", f.streams, "concurrent requests (with --text: stories, one after another)")
      ->capture_default_str();
  app.add_option("-p,--n-prompt", f.num_prompt, "prompt tokens per request")->capture_default_str();
  app.add_option("-n,--n-gen", f.num_gen, "tokens generated per request")->capture_default_str();
  app.add_flag("--json", f.json, "print JSON");
  app.add_option("-r,--repetitions", f.reps, "runs of each (alternated); the fastest counts")->capture_default_str();
  app.add_option("--text", f.text_path, "n-gram speculation on this file's stories (a trained model's real acceptance)");
  app.add_flag("--quote", f.quote, "with --text: prompts whose output may quote them");
  app.add_option("--draft-model", f.draft_path,
                 "the proposer is this draft model (same vocabulary), not a replay; with --text, on the stories");
  KVLM_PARSE(app, argc, argv);
  if (f.streams < 1 || f.num_prompt < 2 || f.num_gen < 1 || f.spec_tokens < 0 || f.reps < 1)
    throw_error(ErrorCode::kInvalidArgument, "--streams, -n and -r must be >= 1, -p >= 2, --spec-tokens >= 0");
  if (!f.draft_path.empty()) return bench_draft(f);
  if (!f.text_path.empty()) return bench_ngram(f);
  const int32_t vocab = load_model(f.model_path)->config().vocab_size;
  const std::vector<GenerateRequest> requests = make_requests(f, vocab);
  const Run reference = run(f, requests, nullptr);  // the continuation to replay (and a warm-up)
  nlohmann::json rows = nlohmann::json::array();
  for (double a : f.acceptance) {
    auto replay = std::make_shared<ReplayProposer>(a, vocab);
    for (size_t i = 0; i < requests.size(); ++i) replay->add(requests[i].prompt_tokens, reference.outputs[i]);
    // The fastest of --repetitions runs each, alternated.
    Run off, on;
    for (int i = 0; i < f.reps; ++i) {
      Run a = run(f, requests, nullptr), b = run(f, requests, replay);
      if (a.tokens_per_s > off.tokens_per_s) off = std::move(a);
      if (b.tokens_per_s > on.tokens_per_s) on = std::move(b);
    }
    const EngineMetrics& m = on.metrics;
    nlohmann::json row = {
        {"acceptance", a},
        {"tokens_per_s", on.tokens_per_s},
        {"baseline_tokens_per_s", off.tokens_per_s},
        {"speedup", on.tokens_per_s / off.tokens_per_s},
        {"cpu_tokens_per_s", on.tokens_per_cpu_s},
        {"baseline_cpu_tokens_per_s", off.tokens_per_cpu_s},
        {"cpu_speedup", on.tokens_per_cpu_s / off.tokens_per_cpu_s},
        {"proposed", m.num_spec_proposed},
        {"accepted", m.num_spec_accepted},
        {"measured_acceptance", m.num_spec_proposed ? static_cast<double>(m.num_spec_accepted) / m.num_spec_proposed : 0.0},
        {"steps", m.num_steps},
        {"baseline_steps", off.metrics.num_steps},
        {"identical", on.outputs == reference.outputs && off.outputs == reference.outputs},
    };
    if (!f.json)
      fmt::print("acceptance {:.2f}: {:.2f} tok/s vs {:.2f} off ({:.2f}x; per CPU second {:.2f}x), accepted {}/{}, "
                 "steps {} vs {}, identical {}\n",
                 a, on.tokens_per_s, off.tokens_per_s, on.tokens_per_s / off.tokens_per_s,
                 on.tokens_per_cpu_s / off.tokens_per_cpu_s, m.num_spec_accepted,
                 m.num_spec_proposed, m.num_steps, off.metrics.num_steps, row["identical"].get<bool>());
    std::fflush(stdout);
    rows.push_back(std::move(row));
  }
  if (f.json) {
    const nlohmann::json out = {{"model", f.model_path}, {"threads", f.threads},      {"streams", f.streams},
                                {"n_prompt", f.num_prompt}, {"n_gen", f.num_gen}, {"spec_tokens", f.spec_tokens},
                                {"results", rows}};
    fmt::print("{}\n", out.dump(2));
  }
  return 0;
}

}  // namespace kvlm::apps
