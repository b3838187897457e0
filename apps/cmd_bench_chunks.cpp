// kvlm bench chunks: what reusing documents' KV wherever they stand (KV
// chunks, GenerateRequest::kv_chunks: CacheBlend's reuse with a share of the
// tokens recomputed) saves in time to first token and costs in quality, on
// RAG-shaped prompts (apps/chunks_workload.h). Every mode runs the same
// requests one at a time through the in-process engine:
//   full    — no chunks, no prefix-cache hit (a cache salt per request): the
//             prefill a prompt costs alone, and the reference predictions;
//   prefix  — the prefix cache alone, each document cached once first;
//   chunks  — the documents marked as KV chunks, each computed once first,
//             reused with each recompute share.
// Each request's prompt carries its continuation, whose tokens' log-
// probabilities (prompt_logprobs from the continuation on) give the quality:
// mean |delta nll| against full, and the continuation's perplexity.
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "apps/bench_stats.h"
#include "apps/chunks_workload.h"
#include "apps/cli_parse.h"
#include "apps/commands.h"
#include "apps/engine_options.h"
#include "common/error.h"
#include "common/mapped_file.h"
#include "engine/request_stream.h"
#include "model/model.h"

namespace kvlm::apps {
namespace {

// How one mode submits its requests.
struct ChunksMode {
  std::string name;             // "full", "prefix", "chunks"
  std::optional<double> share;  // chunks: kv_blend_recompute (and the documents marked)
  uint64_t salt = 0;            // the mode's own prefix-cache namespace; 0: a fresh one per request (full)
};

// One mode's measurements over every request.
struct ChunksModeRun {
  ChunksMode mode;
  std::vector<double> ttft_ms;  // a request's
  std::vector<double> nll;      // each continuation token's, request by request
  // RequestStats, summed over the timed requests.
  int64_t num_reused = 0, num_recomputed = 0, num_cached = 0;
  // EngineMetrics' KV chunk counters over the timed requests.
  int64_t num_lookups = 0, num_hits = 0;
};

// The salts of the full mode's requests, one each: none is ever used twice,
// so none of them hits the prefix cache.
constexpr uint64_t kFirstFreshSalt = uint64_t{1} << 40;

GenerateRequest one_token_request(const std::vector<int32_t>& tokens, uint64_t salt) {
  GenerateRequest g;
  g.prompt_tokens = tokens;
  g.max_tokens = 1;
  g.ignore_eos = true;
  g.sampling.temperature = 0.f;
  g.cache_salt = salt;
  return g;
}

// Reads a stream to its end: the prompt logprobs it carried (empty if none)
// and the final statistics. Throws the request's error.
std::vector<SampledLogprobs> drain_stream(RequestStream& stream) {
  std::vector<SampledLogprobs> lp;
  while (auto ev = stream.next()) {
    if (ev->error) throw *ev->error;
    if (!ev->prompt_logprobs.empty()) lp = std::move(ev->prompt_logprobs);
  }
  return lp;
}

// Each document once as a request of its own (BOS and the document, marked
// as a chunk in the chunks modes), untimed: the cache the timed requests
// reuse, as CacheBlend's evaluation has it.
void warm_documents(Engine& engine, const ChunksWorkload& w, const ChunksMode& mode) {
  for (const std::vector<int32_t>& doc : w.docs) {
    std::vector<int32_t> tokens;
    if (w.bos) tokens.push_back(*w.bos);
    const auto begin = static_cast<int32_t>(tokens.size());
    tokens.insert(tokens.end(), doc.begin(), doc.end());
    GenerateRequest g = one_token_request(tokens, mode.salt);
    if (mode.share) {
      g.kv_chunks = {TokenSpan{begin, static_cast<int32_t>(tokens.size())}};
      g.kv_blend_recompute = *mode.share;
    }
    drain_stream(*engine.submit(std::move(g)));
  }
}

// One timed request: TTFT, and the continuation tokens' nll appended to run.
void score_request(Engine& engine, const ChunksRequest& q, const ChunksMode& mode, uint64_t salt,
                   ChunksModeRun& run) {
  GenerateRequest g = one_token_request(q.tokens, salt);
  g.prompt_logprobs = true;
  // Position p's logits score token p + 1: the continuation's first token
  // is scored from the position before it.
  g.prompt_logprobs_from = q.continuation_begin - 1;
  if (mode.share) {
    g.kv_chunks = q.chunks;
    g.kv_blend_recompute = *mode.share;
  }
  auto stream = engine.submit(std::move(g));
  const std::vector<SampledLogprobs> lp = drain_stream(*stream);
  // The last entries are the continuation's, whether the engine scored from
  // prompt_logprobs_from or (before it knew the field) the whole prompt.
  const size_t num_continuation = q.tokens.size() - static_cast<size_t>(q.continuation_begin);
  if (lp.size() < num_continuation)
    throw_error(ErrorCode::kInternal, "expected {} prompt log-probabilities, got {}", num_continuation, lp.size());
  for (size_t i = lp.size() - num_continuation; i < lp.size(); ++i)
    run.nll.push_back(-static_cast<double>(lp[i].chosen.logprob));
  const RequestStats stats = stream->stats();
  run.ttft_ms.push_back(stats.ttft_s * 1e3);
  run.num_reused += stats.num_chunk_reused_tokens;
  run.num_recomputed += stats.num_chunk_recomputed_tokens;
  run.num_cached += stats.num_cached_tokens;
}

ChunksModeRun run_mode(Engine& engine, const ChunksWorkload& w, const ChunksMode& mode, uint64_t& fresh_salt) {
  if (mode.salt != 0) warm_documents(engine, w, mode);
  ChunksModeRun run{mode, {}, {}, 0, 0, 0, 0, 0};
  const EngineMetrics before = engine.metrics();
  for (const ChunksRequest& q : w.requests) score_request(engine, q, mode, mode.salt != 0 ? mode.salt : fresh_salt++, run);
  const EngineMetrics after = engine.metrics();
  run.num_lookups = after.num_kv_chunk_lookups - before.num_kv_chunk_lookups;
  run.num_hits = after.num_kv_chunk_hits - before.num_kv_chunk_hits;
  return run;
}

double mean_of(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / static_cast<double>(v.size());
}

// The figures of one table row or JSON row, against the full mode's run.
struct ChunksRowFigures {
  double ttft_mean = 0, ttft_p50 = 0, ttft_ratio = 0, mean_abs_dnll = 0, ppl = 0, ppl_diff_pct = 0;
};

ChunksRowFigures row_figures(const ChunksModeRun& run, const ChunksModeRun& full) {
  ChunksRowFigures f;
  f.ttft_mean = mean_of(run.ttft_ms);
  f.ttft_p50 = summarize(run.ttft_ms).p50;
  const double full_ttft = mean_of(full.ttft_ms);
  f.ttft_ratio = full_ttft > 0 ? f.ttft_mean / full_ttft : 0;
  double sum = 0;
  for (size_t i = 0; i < run.nll.size(); ++i) sum += std::abs(run.nll[i] - full.nll[i]);
  f.mean_abs_dnll = run.nll.empty() ? 0 : sum / static_cast<double>(run.nll.size());
  f.ppl = std::exp(mean_of(run.nll));
  f.ppl_diff_pct = 100.0 * (f.ppl / std::exp(mean_of(full.nll)) - 1.0);
  return f;
}

// Every recompute share of --shares, each in [0, 1].
std::vector<double> parse_shares(const std::string& list) {
  std::vector<double> out;
  for (const std::string& item : split_list(list)) {
    size_t used = 0;
    double v = -1;
    try {
      v = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || !(v >= 0 && v <= 1))
      throw_error(ErrorCode::kInvalidArgument, "--shares: '{}' is not a share in [0, 1]", item);
    out.push_back(v);
  }
  if (out.empty()) throw_error(ErrorCode::kInvalidArgument, "--shares is empty");
  return out;
}

// full, prefix, then one chunks mode per share, each in its own cache namespace.
std::vector<ChunksModeRun> run_all_modes(Engine& engine, const ChunksWorkload& w, const std::vector<double>& shares) {
  std::vector<ChunksMode> modes = {{"full", std::nullopt, 0}, {"prefix", std::nullopt, 1}};
  for (size_t i = 0; i < shares.size(); ++i) modes.push_back({"chunks", shares[i], 2 + i});
  uint64_t fresh_salt = kFirstFreshSalt;
  // One untimed request first: the weights paged in, the threads started.
  drain_stream(*engine.submit(one_token_request(w.requests.front().tokens, fresh_salt++)));
  std::vector<ChunksModeRun> runs;
  for (const ChunksMode& mode : modes) {
    runs.push_back(run_mode(engine, w, mode, fresh_salt));
    const ChunksRowFigures f = row_figures(runs.back(), runs.front());
    fmt::print(stderr, "  {:<7} {:>5}: TTFT {:.1f} ms, |dnll| {:.5f}, ppl {:.4f}, reused {}, recomputed {}\n",
               mode.name, mode.share ? fmt::format("{:g}", *mode.share) : "-", f.ttft_mean, f.mean_abs_dnll, f.ppl,
               runs.back().num_reused, runs.back().num_recomputed);
  }
  return runs;
}

struct ChunksReport {
  std::string model;
  const ChunksWorkloadSpec* spec = nullptr;
  const ChunksWorkload* workload = nullptr;
  std::string query;
};

nlohmann::json report_json(const ChunksReport& rep, const std::vector<ChunksModeRun>& runs) {
  const ChunksWorkloadSpec& s = *rep.spec;
  nlohmann::json j = {{"model", rep.model}, {"docs", s.num_docs}, {"k", s.docs_per_request},
                      {"doc_tokens", s.doc_tokens}, {"requests", s.num_requests}, {"tail", s.tail_tokens},
                      {"continuation", s.continuation_tokens}, {"query", rep.query}, {"seed", s.seed},
                      {"doc_tokens_mean", rep.workload->mean_doc_tokens()},
                      {"prompt_tokens_mean", rep.workload->mean_request_tokens()},
                      {"ttft_includes_continuation", true}, {"rows", nlohmann::json::array()}};
  for (const ChunksModeRun& run : runs) {
    const ChunksRowFigures f = row_figures(run, runs.front());
    j["rows"].push_back({{"mode", run.mode.name},
                         {"share", run.mode.share ? nlohmann::json(*run.mode.share) : nlohmann::json(nullptr)},
                         {"ttft_ms_mean", f.ttft_mean}, {"ttft_ms_p50", f.ttft_p50},
                         {"ttft_ratio_to_full", f.ttft_ratio}, {"mean_abs_dnll", f.mean_abs_dnll}, {"ppl", f.ppl},
                         {"ppl_diff_pct", f.ppl_diff_pct}, {"reused_tokens", run.num_reused},
                         {"recomputed_tokens", run.num_recomputed}, {"cached_tokens", run.num_cached},
                         {"chunk_lookups", run.num_lookups}, {"chunk_hits", run.num_hits}});
  }
  return j;
}

void print_report(const ChunksReport& rep, const std::vector<ChunksModeRun>& runs) {
  const ChunksWorkloadSpec& s = *rep.spec;
  const ChunksWorkload& w = *rep.workload;
  fmt::print("model {}\n{} documents of {:.1f} tokens on average (--doc-tokens {}), {} requests of {} documents, "
             "tail {} and continuation {} tokens (--query {}): prompts of {:.1f} tokens on average\n",
             rep.model, s.num_docs, w.mean_doc_tokens(), s.doc_tokens, s.num_requests, s.docs_per_request,
             s.tail_tokens, s.continuation_tokens, rep.query, w.mean_request_tokens());
  fmt::print("TTFT: of the request that scores the continuation, whose {} tokens are part of its prompt; "
             "token counts: summed over the {} requests\n\n",
             s.continuation_tokens, s.num_requests);
  fmt::print("| {:<6} | {:>5} | {:>12} | {:>11} | {:>6} | {:>11} | {:>11} | {:>8} | {:>7} | {:>10} | {:>7} |\n", "mode",
             "share", "TTFT ms mean", "TTFT ms p50", "x full", "mean |dNLL|", "ppl", "ppl diff", "reused",
             "recomputed", "cached");
  fmt::print("|--------|------:|-------------:|------------:|-------:|------------:|------------:|---------:|--------:|"
             "-----------:|--------:|\n");
  int64_t num_reused = 0;
  for (const ChunksModeRun& run : runs) {
    const ChunksRowFigures f = row_figures(run, runs.front());
    fmt::print("| {:<6} | {:>5} | {:>12.2f} | {:>11.2f} | {:>6.3f} | {:>11.6f} | {:>11.4f} | {:>7.3f}% | {:>7} | {:>10} "
               "| {:>7} |\n",
               run.mode.name, run.mode.share ? fmt::format("{:g}", *run.mode.share) : "-", f.ttft_mean, f.ttft_p50,
               f.ttft_ratio, f.mean_abs_dnll, f.ppl, f.ppl_diff_pct, run.num_reused, run.num_recomputed,
               run.num_cached);
    num_reused += run.num_reused;
  }
  if (num_reused == 0)
    fmt::print("\nNo chunk token was reused: this engine computed the marked prompts in full.\n");
}

}  // namespace

int bench_chunks(int argc, char** argv) {
  CLI::App app{"Time to first token and quality of KV chunks reused in RAG-shaped prompts", "kvlm bench chunks"};
  EngineOptions eo;
  add_engine_options(app, eo);
  ChunksWorkloadSpec spec;
  std::string text_path = "../shared/text/tinystories_sample.txt", shares_arg = "0,0.05,0.15,0.3,1", query = "doc";
  bool json = false;
  app.add_option("--text", text_path, "text the documents and queries are cut from")->capture_default_str();
  app.add_option("--docs", spec.num_docs, "documents in the pool")->capture_default_str();
  app.add_option("--doc-tokens", spec.doc_tokens, "tokens per document (cut at the next sentence end)")
      ->capture_default_str();
  app.add_option("--requests", spec.num_requests, "requests per mode, run one at a time")->capture_default_str();
  app.add_option("--k", spec.docs_per_request, "documents per request, in a random order")->capture_default_str();
  app.add_option("--tail", spec.tail_tokens, "tokens between the documents and the continuation")
      ->capture_default_str();
  app.add_option("--continuation", spec.continuation_tokens, "scored tokens after the tail")->capture_default_str();
  app.add_option("--query", query,
                 "doc: tail and continuation are a passage of one of the request's documents; text: the start of "
                 "a paragraph after the pool's")
      ->capture_default_str();
  app.add_option("--shares", shares_arg, "comma-separated recompute shares, one chunks run each")
      ->capture_default_str();
  app.add_option("--seed", spec.seed, "seed of the documents' draws")->capture_default_str();
  app.add_flag("--json", json, "print one JSON document instead of the table");
  KVLM_PARSE(app, argc, argv);

  if (eo.no_prefix_cache)
    throw_error(ErrorCode::kInvalidArgument,
                "bench chunks needs the prefix cache (KV chunks are kept there); the full baseline has a cache salt "
                "per request instead");
  if (query != "doc" && query != "text")
    throw_error(ErrorCode::kInvalidArgument, "--query '{}' is not doc or text", query);
  spec.query = query == "doc" ? ChunksQuery::kDoc : ChunksQuery::kText;
  const std::vector<double> shares = parse_shares(shares_arg);
  const std::string text = read_file_bytes(text_path);
  auto engine = start_engine(eo);
  const ChunksWorkload w = make_chunks_workload(text, engine->tokenizer(), spec);
  // A request's prompt and its one generated token.
  const int32_t context_needed = w.max_request_tokens() + 1;
  if (context_needed > engine->max_model_len()) {
    if (eo.max_model_len > 0)
      throw_error(ErrorCode::kInvalidArgument, "a request needs a context of {} tokens, past --max-model-len {}",
                  context_needed, eo.max_model_len);
    // Positions past the trained context extrapolate (RoPE), as bench kv's chunks may.
    fmt::print(stderr, "bench chunks: requests of up to {} tokens: --max-model-len {} (the engine's was {})\n",
               w.max_request_tokens(), context_needed, engine->max_model_len());
    eo.max_model_len = context_needed;
    engine.reset();
    engine = start_engine(eo);
  }
  const std::vector<ChunksModeRun> runs = run_all_modes(*engine, w, shares);
  const ChunksReport rep{eo.model_path, &spec, &w, query};
  if (json) {
    fmt::print("{}\n", report_json(rep, runs).dump(2));
  } else {
    print_report(rep, runs);
  }
  return 0;
}

}  // namespace kvlm::apps
