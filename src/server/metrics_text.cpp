#include "server/metrics_text.h"

#include <cstdio>
#include <ctime>

#include <unistd.h>

#include <fmt/format.h>

#include "constrain/grammar_cache.h"
#include "engine/engine.h"
#include "kv/kv_policy.h"

namespace kvlm {
namespace {

// The fraction of the pool's blocks in use (0 to 1), under every engine's name.
double kv_usage(const EngineMetrics& m) {
  return m.num_kv_blocks ? static_cast<double>(m.num_kv_blocks_used) / m.num_kv_blocks : 0.0;
}

// Label values escape backslash, quote and newline.
std::string escape_label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

class Writer {
 public:
  explicit Writer(const std::string& model) : labels_(fmt::format("model_name=\"{}\"", escape_label(model))) {}

  void metric(const char* name, const char* type, const char* help, double value) {
    header(name, type, help);
    out_ += fmt::format("{}{{{}}} {}\n", name, labels_, value);
  }
  void labelled(const char* name, const char* type, const char* help,
                std::initializer_list<std::pair<const char*, double>> values, const char* label) {
    header(name, type, help);
    for (const auto& [v, x] : values) out_ += fmt::format("{}{{{},{}=\"{}\"}} {}\n", name, labels_, label, v, x);
  }
  void labelled(const char* name, const char* type, const char* help,
                const std::vector<std::pair<std::string, double>>& values, const char* label) {
    header(name, type, help);
    for (const auto& [v, x] : values) out_ += fmt::format("{}{{{},{}=\"{}\"}} {}\n", name, labels_, label, v, x);
  }
  void histogram(const char* name, const char* help, const Histogram& h) {
    header(name, "histogram", help);
    for (size_t i = 0; i < h.upper_bounds().size(); ++i)
      out_ += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", name, labels_, h.upper_bounds()[i], h.cumulative_count(i));
    out_ += fmt::format("{}_bucket{{{},le=\"+Inf\"}} {}\n", name, labels_, h.count());
    out_ += fmt::format("{}_sum{{{}}} {}\n", name, labels_, h.sum());
    out_ += fmt::format("{}_count{{{}}} {}\n", name, labels_, h.count());
  }
  // Per tier and reason: the tier's answers that were not used.
  void tier_refusals(const char* name, const char* help, const std::vector<TierStats>& tiers) {
    header(name, "counter", help);
    for (const TierStats& t : tiers)
      for (size_t r = 0; r < kNumTierRefusals; ++r)
        out_ += fmt::format("{}{{{},tier=\"{}\",reason=\"{}\"}} {}\n", name, labels_, escape_label(t.name),
                            tier_refusal_name(static_cast<TierRefusal>(r)), t.num_refused[r]);
  }
  // Per-tier histograms: the tiers count per bucket; Prometheus wants them cumulative.
  void tier_latency(const char* name, const char* help, const std::vector<TierStats>& tiers) {
    header(name, "histogram", help);
    for (const TierStats& t : tiers) {
      const std::string labels = fmt::format("{},tier=\"{}\"", labels_, escape_label(t.name));
      int64_t cumulative = 0;
      for (size_t i = 0; i < kTierLatencyBoundsS.size(); ++i) {
        cumulative += t.load_latency_buckets[i];
        out_ += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", name, labels, kTierLatencyBoundsS[i], cumulative);
      }
      cumulative += t.load_latency_buckets.back();
      out_ += fmt::format("{}_bucket{{{},le=\"+Inf\"}} {}\n", name, labels, cumulative);
      out_ += fmt::format("{}_sum{{{}}} {}\n", name, labels, t.load_latency_sum_s);
      out_ += fmt::format("{}_count{{{}}} {}\n", name, labels, cumulative);
    }
  }
  // An info gauge: value 1 (or `value`), what it says in its labels (given in full).
  void info(const char* name, const char* help, std::initializer_list<std::pair<const char*, std::string>> labels,
            double value = 1) {
    header(name, "gauge", help);
    std::string text;
    for (const auto& [k, v] : labels) text += fmt::format("{}{}=\"{}\"", text.empty() ? "" : ",", k, escape_label(v));
    out_ += fmt::format("{}{{{}}} {}\n", name, text, value);
  }
  std::string take() { return std::move(out_); }

 private:
  void header(const char* name, const char* type, const char* help) {
    out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  std::string labels_;
  std::string out_;
};

// One series per tier (label tier="disk" / "redis"), only when tiers exist.
void write_tier_metrics(Writer& w, const EngineMetrics& m) {
  if (m.tiers.empty()) return;
  auto per_tier = [&](const char* name, const char* type, const char* help, auto value) {
    std::vector<std::pair<std::string, double>> v;
    for (const TierStats& t : m.tiers) v.emplace_back(t.name, static_cast<double>(value(t)));
    w.labelled(name, type, help, v, "tier");
  };
  per_tier("kvlm_kv_tier_up", "gauge",
           "1 while the KV tier answers, 0 while every command of its last call failed (its misses are recomputed).",
           [](const TierStats& t) { return t.up ? 1 : 0; });
  per_tier("kvlm_kv_tier_lookups_total", "counter", "Lookups sent to the KV tier.", [](const TierStats& t) { return t.num_lookups; });
  per_tier("kvlm_kv_tier_hit_blocks_total", "counter", "KV blocks from the tier that requests used (verified, taken into the pool).",
           [](const TierStats& t) { return t.num_hit_blocks; });
  per_tier("kvlm_kv_tier_blocks_written_total", "counter", "KV blocks written to the tier.",
           [](const TierStats& t) { return t.num_blocks_written; });
  per_tier("kvlm_kv_tier_blocks_dropped_total", "counter", "KV block writes the tier did not take (full, down, too large).",
           [](const TierStats& t) { return t.num_blocks_dropped; });
  per_tier("kvlm_kv_tier_read_bytes_total", "counter", "Bytes read from the tier.", [](const TierStats& t) { return t.num_bytes_read; });
  per_tier("kvlm_kv_tier_written_bytes_total", "counter", "Bytes written to the tier.",
           [](const TierStats& t) { return t.num_bytes_written; });
  per_tier("kvlm_kv_tier_errors_total", "counter", "I/O or protocol errors and timeouts of the tier.",
           [](const TierStats& t) { return t.num_errors; });
  per_tier("kvlm_kv_tier_corrupt_records_total", "counter", "Records the tier held that failed validation (never loaded).",
           [](const TierStats& t) { return t.num_corrupt; });
  per_tier("kvlm_kv_tier_records", "gauge", "Records the tier holds (disk).", [](const TierStats& t) { return t.num_records; });
  w.tier_refusals("kvlm_kv_tier_refused_total",
                  "Tier answers not used, by reason: bad_mac, corrupt, foreign, wrong_type, oversize, timeout.", m.tiers);
  w.metric("kvlm_kv_tier_lookups_timed_out_total", "counter",
           "Lookups not answered by --kv-tier-timeout-ms: the request went on and computed the blocks.",
           static_cast<double>(m.num_tier_lookups_timed_out));
  w.metric("kvlm_kv_tier_hit_tokens_total", "counter", "Prompt tokens loaded from a KV tier instead of computed.",
           static_cast<double>(m.num_tier_hit_tokens));
  w.metric("kvlm_kv_tier_write_drops_total", "counter", "Full blocks the tiers' write queue refused (full or duplicate).",
           static_cast<double>(m.num_tier_writes_dropped));
  w.metric("kvlm_requests_loading", "gauge", "Requests waiting for a KV tier lookup.", m.num_loading);
  w.tier_latency("kvlm_kv_tier_load_latency_seconds", "Time of one lookup in the tier.", m.tiers);
}

// KV chunks (docs/kv-chunks.md): reuse at any position.
void write_kv_chunk_metrics(Writer& w, const EngineMetrics& m) {
  w.metric("kvlm_kv_chunk_lookups_total", "counter", "KV chunks of prompts looked up at admission.",
           static_cast<double>(m.num_kv_chunk_lookups));
  w.metric("kvlm_kv_chunk_hits_total", "counter", "KV chunks found with blocks cached before their request came.",
           static_cast<double>(m.num_kv_chunk_hits));
  w.metric("kvlm_kv_chunk_reused_tokens_total", "counter",
           "Prompt tokens whose KV was copied from chunks (cached, or computed alone for the request) instead of computed.",
           static_cast<double>(m.num_kv_chunk_reused_tokens));
  w.metric("kvlm_kv_chunk_recomputed_tokens_total", "counter",
           "Tokens of cached chunks recomputed in their prompt's context (the blend, --kv-blend-recompute).",
           static_cast<double>(m.num_kv_chunk_recomputed_tokens));
}

}  // namespace

std::string prometheus_text(const EngineMetrics& m, const std::string& model_name) {
  Writer w(model_name);
  w.metric("kvlm_requests_running", "gauge", "Requests in the running batch.", m.num_running);
  w.metric("kvlm_requests_waiting", "gauge", "Requests waiting to be scheduled.", m.num_waiting);
  w.metric("kvlm_kv_blocks_capacity", "gauge", "KV cache blocks in the pool (used or free).", m.num_kv_blocks);
  w.metric("kvlm_kv_blocks_used", "gauge", "KV cache blocks referenced by requests.", m.num_kv_blocks_used);
  w.metric("kvlm_kv_blocks_peak", "gauge", "Most KV cache blocks referenced at once since start.", m.peak_kv_blocks_used);
  w.metric("kvlm_kv_usage_ratio", "gauge", "Fraction of KV cache blocks in use (0 to 1).", kv_usage(m));
  w.metric("kvlm_kv_block_size_tokens", "gauge", "Token slots per KV cache block.", m.block_size);
  w.metric("kvlm_prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.",
           static_cast<double>(m.num_prefix_query_tokens));
  w.metric("kvlm_prefix_cache_hits_total", "counter", "Prompt tokens served by the prefix cache.",
           static_cast<double>(m.num_prefix_hit_tokens));
  w.metric("kvlm_prefix_cache_evictions_total", "counter", "Cached KV blocks evicted for reuse.",
           static_cast<double>(m.num_prefix_evicted_blocks));
  write_kv_chunk_metrics(w, m);
  w.metric("kvlm_preemptions_total", "counter", "Requests preempted for lack of KV blocks.",
           static_cast<double>(m.num_preemptions));
  w.metric("kvlm_prompt_tokens_total", "counter", "Prompt tokens submitted.", static_cast<double>(m.num_prompt_tokens));
  w.metric("kvlm_generation_tokens_total", "counter", "Tokens generated.", static_cast<double>(m.num_generated_tokens));
  w.metric("kvlm_engine_steps_total", "counter", "Engine steps run.", static_cast<double>(m.num_steps));
  w.metric("kvlm_spec_proposed_tokens_total", "counter", "Speculative decoding: proposed tokens verified.",
           static_cast<double>(m.num_spec_proposed));
  w.metric("kvlm_spec_accepted_tokens_total", "counter", "Speculative decoding: proposed tokens accepted.",
           static_cast<double>(m.num_spec_accepted));
  w.metric("kvlm_spec_verify_steps_total", "counter", "Speculative decoding: sequence steps that verified proposals.",
           static_cast<double>(m.num_spec_steps));
  w.metric("kvlm_spec_draft_sequences", "gauge", "Speculative decoding: sequences the draft model keeps KV for.",
           m.num_spec_draft_seqs);
  w.metric("kvlm_spec_draft_kv_bytes", "gauge",
           "Speculative decoding: bytes of the draft model's KV buffers (capacity; pages are touched as they fill).",
           static_cast<double>(m.spec_draft_kv_bytes));
  w.metric("kvlm_spec_propose_seconds_total", "counter",
           "Speculative decoding: step-thread time spent making proposals (a draft model's passes).",
           m.spec_propose_s);
  {
    std::vector<std::pair<std::string, double>> per_step;
    for (size_t n = 1; n < m.spec_tokens_per_step.size(); ++n)
      per_step.emplace_back(n + 1 == m.spec_tokens_per_step.size() ? fmt::format("{}+", n) : std::to_string(n),
                            static_cast<double>(m.spec_tokens_per_step[n]));
    w.labelled("kvlm_spec_tokens_per_step_total", "counter",
               "Speculative decoding: verifying sequence steps by the tokens they gave (1 + accepted).", per_step,
               "tokens");
  }
  w.labelled("kvlm_engine_step_seconds_total", "counter",
             "Step-thread time by phase; all but forward is serial work around the forward pass.",
             {{"schedule", m.step_times.schedule_s},
              {"forward", m.step_times.forward_s},
              {"sample", m.step_times.sample_s},
              {"postprocess", m.step_times.postprocess_s}},
             "phase");
  w.labelled("kvlm_requests_finished_total", "counter", "Finished requests by finish reason.",
             {{"stop", static_cast<double>(m.num_requests_stopped)},
              {"length", static_cast<double>(m.num_requests_length)},
              {"abort", static_cast<double>(m.num_requests_aborted)}},
             "finished_reason");
  w.metric("kvlm_requests_failed_total", "counter", "Requests ended by an error after they were queued.",
           static_cast<double>(m.num_requests_failed));
  w.metric("kvlm_requests_timed_out_total", "counter", "Requests stopped at the server's time limit (--request-timeout).",
           static_cast<double>(m.num_requests_timed_out));
  std::vector<std::pair<std::string, double>> evicted;
  for (KvPolicyKind k : all_kv_policies())
    evicted.emplace_back(kv_policy_name(k), static_cast<double>(m.num_kv_evicted_tokens[static_cast<size_t>(k)]));
  w.labelled("kvlm_kv_evicted_tokens_total", "counter", "KV tokens dropped by per-sequence budgets, by policy.",
             evicted, "policy");
  w.histogram("kvlm_kv_resident_tokens", "Most KV tokens a finished request held at once.", m.resident_tokens);
  write_tier_metrics(w, m);
  w.histogram("kvlm_time_to_first_token_seconds", "Time from arrival to the first generated token.", m.ttft_s);
  w.histogram("kvlm_inter_token_latency_seconds", "Time between consecutive generated tokens.", m.itl_s);
  w.histogram("kvlm_e2e_request_latency_seconds", "Time from arrival to finish.", m.e2e_s);
  w.histogram("kvlm_request_queue_time_seconds", "Time from arrival to first scheduling.", m.queue_s);
  return w.take();
}

namespace {

void write_grammar_metrics(Writer& w, const constrain::GrammarStats& g) {
  w.metric("kvlm_grammar_memory_bytes", "gauge",
           "Bytes held by grammar compilations, cached grammars and the grammars of running requests.",
           static_cast<double>(g.num_bytes_in_use));
  w.metric("kvlm_grammar_memory_budget_bytes", "gauge", "The grammars' memory budget (--grammar-mem).",
           static_cast<double>(g.budget_bytes));
  w.metric("kvlm_grammar_compilations_running", "gauge", "Grammar compilations running now.", g.num_compiling);
  w.metric("kvlm_grammar_compilations_waiting", "gauge",
           "Requests waiting for a compilation slot or for another request's compilation of their grammar.",
           g.num_waiting);
  w.metric("kvlm_grammar_compilations_total", "counter", "Grammars compiled.", static_cast<double>(g.num_compiled));
  w.metric("kvlm_grammar_cache_hits_total", "counter", "Grammars found compiled (or refused) in the cache.",
           static_cast<double>(g.num_hits));
  w.metric("kvlm_grammar_cache_entries", "gauge", "Compiled grammars and refusals the cache holds.",
           static_cast<double>(g.num_cached));
  w.metric("kvlm_grammar_cache_bytes", "gauge",
           "Bytes of the cached grammars and keys (at most a sixteenth of --grammar-mem; part of the memory above).",
           static_cast<double>(g.num_cached_bytes));
  std::vector<std::pair<std::string, double>> refused;
  for (auto limit : {constrain::GrammarLimit::kTooLarge, constrain::GrammarLimit::kMemory, constrain::GrammarLimit::kBusy})
    refused.emplace_back(constrain::grammar_limit_name(limit), static_cast<double>(g.num_refused[static_cast<int>(limit)]));
  w.labelled("kvlm_grammar_refused_total", "counter",
             "Grammars refused for their cost, by reason: too_large (400), memory and busy (503).", refused, "reason");
}

}  // namespace

std::optional<MetricsCompat> parse_metrics_compat(const std::string& name) {
  if (name == "vllm") return MetricsCompat::kVllm;
  if (name == "sglang") return MetricsCompat::kSglang;
  return std::nullopt;
}

namespace {

// vLLM's names (its V1 engine), labelled model_name as vLLM labels them; the
// old gpu_cache_usage_perc too, which routers of older vLLMs read.
void write_vllm(Writer& w, const EngineMetrics& m, const std::string& model_name) {
  w.metric("vllm:num_requests_running", "gauge", "Requests in the running batch (kvlm_requests_running).", m.num_running);
  w.metric("vllm:num_requests_waiting", "gauge", "Requests waiting to be scheduled (kvlm_requests_waiting).",
           m.num_waiting);
  w.metric("vllm:kv_cache_usage_perc", "gauge", "KV cache usage, 0 to 1 (kvlm_kv_usage_ratio).", kv_usage(m));
  w.metric("vllm:gpu_cache_usage_perc", "gauge", "KV cache usage, 0 to 1 (kvlm_kv_usage_ratio; vLLM's old name).",
           kv_usage(m));
  w.info("vllm:cache_config_info", "The KV cache's block size and block count.",
         {{"block_size", std::to_string(m.block_size)}, {"num_gpu_blocks", std::to_string(m.num_kv_blocks)},
          {"model_name", model_name}});
  w.metric("vllm:prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.",
           static_cast<double>(m.num_prefix_query_tokens));
  w.metric("vllm:prefix_cache_hits_total", "counter", "Prompt tokens served by the prefix cache.",
           static_cast<double>(m.num_prefix_hit_tokens));
  w.metric("vllm:num_preemptions_total", "counter", "Requests preempted for lack of KV blocks.",
           static_cast<double>(m.num_preemptions));
  w.metric("vllm:prompt_tokens_total", "counter", "Prompt tokens submitted.", static_cast<double>(m.num_prompt_tokens));
  w.metric("vllm:generation_tokens_total", "counter", "Tokens generated.", static_cast<double>(m.num_generated_tokens));
  w.histogram("vllm:time_to_first_token_seconds", "Time from arrival to the first generated token.", m.ttft_s);
  w.histogram("vllm:inter_token_latency_seconds", "Time between consecutive generated tokens.", m.itl_s);
  w.histogram("vllm:e2e_request_latency_seconds", "Time from arrival to finish.", m.e2e_s);
}

// SGLang's names for its scheduler's state.
void write_sglang(Writer& w, const EngineMetrics& m) {
  w.metric("sglang:num_running_reqs", "gauge", "Requests in the running batch (kvlm_requests_running).", m.num_running);
  w.metric("sglang:num_queue_reqs", "gauge", "Requests waiting to be scheduled (kvlm_requests_waiting).", m.num_waiting);
  w.metric("sglang:token_usage", "gauge", "KV cache usage, 0 to 1 (kvlm_kv_usage_ratio).", kv_usage(m));
  w.metric("sglang:cache_hit_rate", "gauge", "Prompt tokens served by the prefix cache over those looked up.",
           m.num_prefix_query_tokens ? static_cast<double>(m.num_prefix_hit_tokens) / m.num_prefix_query_tokens : 0.0);
  w.metric("sglang:prompt_tokens_total", "counter", "Prompt tokens submitted.", static_cast<double>(m.num_prompt_tokens));
  w.metric("sglang:generation_tokens_total", "counter", "Tokens generated.", static_cast<double>(m.num_generated_tokens));
}

}  // namespace

std::string compat_metrics_text(const EngineMetrics& m, const std::string& model_name, MetricsCompat compat) {
  Writer w(model_name);
  if (compat == MetricsCompat::kVllm) write_vllm(w, m, model_name);
  else write_sglang(w, m);
  return w.take();
}

std::string server_metrics_text(const ServerSeries& s, const std::string& model_name) {
  Writer w(model_name);
  // Resident memory, the Prometheus client libraries' standard name: the
  // soak test watches it for leaks.
  long pages_total = 0, pages_resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages_total, &pages_resident) != 2) pages_resident = 0;
    std::fclose(f);
  }
  w.metric("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
           static_cast<double>(pages_resident) * static_cast<double>(::sysconf(_SC_PAGESIZE)));
  w.metric("kvlm_heap_trims_total", "counter", "Times freed heap memory was given back to the system (malloc_trim).",
           static_cast<double>(s.num_heap_trims));
  const RejectionCounts& r = s.rejected;
  w.labelled("kvlm_server_rejected_total", "counter", "Requests refused with 503 at a server limit, by limit.",
             {{"connections", static_cast<double>(r.num_connections)},
              {"queue", static_cast<double>(r.num_queue)},
              {"body_memory", static_cast<double>(r.num_body_memory)}},
             "limit");
  w.metric("kvlm_body_memory_bytes", "gauge", "Bytes reserved for the parsed bodies of the requests being handled.",
           static_cast<double>(s.body_memory_bytes));
  w.metric("kvlm_body_memory_budget_bytes", "gauge", "The parsed bodies' memory budget (--body-mem).",
           static_cast<double>(s.body_memory_budget_bytes));
  if (s.grammars) write_grammar_metrics(w, *s.grammars);
  return w.take();
}

std::string lora_metrics_text(const LoraSeries& s, const std::string& model_name, bool vllm) {
  Writer w(model_name);
  w.metric("kvlm_lora_adapters_loaded", "gauge", "LoRA adapters loaded.", static_cast<double>(s.num_loaded));
  w.metric("kvlm_lora_adapters_max", "gauge", "LoRA adapters that may be loaded at once (--max-loras).",
           static_cast<double>(s.max_loras));
  // Adapter names come from requests (POST /v1/load_lora_adapter): escaped.
  auto per_adapter = [&](auto field) {
    std::vector<std::pair<std::string, double>> values;
    for (const auto& [name, u] : s.usage) values.emplace_back(escape_label(name), static_cast<double>(field(u)));
    return values;
  };
  w.labelled("kvlm_lora_requests_total", "counter", "Requests answered with each LoRA adapter.",
             per_adapter([](const LoraUsage& u) { return u.num_requests; }), "adapter");
  w.labelled("kvlm_lora_prompt_tokens_total", "counter", "Prompt tokens of each LoRA adapter's requests.",
             per_adapter([](const LoraUsage& u) { return u.prompt_tokens; }), "adapter");
  w.labelled("kvlm_lora_generation_tokens_total", "counter", "Tokens generated with each LoRA adapter.",
             per_adapter([](const LoraUsage& u) { return u.generated_tokens; }), "adapter");
  w.labelled("kvlm_lora_cached_tokens_total", "counter",
             "Prompt tokens of each LoRA adapter's requests served by the prefix cache.",
             per_adapter([](const LoraUsage& u) { return u.cached_tokens; }), "adapter");
  if (vllm) {
    std::string running;
    for (const std::string& name : s.running) running += (running.empty() ? "" : ",") + name;
    w.info("vllm:lora_requests_info", "Running stats on LoRA requests (value: the scrape's unix time).",
           {{"max_lora", std::to_string(s.max_loras)}, {"running_lora_adapters", running},
            {"waiting_lora_adapters", ""}},
           static_cast<double>(std::time(nullptr)));
  }
  return w.take();
}

}  // namespace kvlm
