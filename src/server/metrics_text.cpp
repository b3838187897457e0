#include "server/metrics_text.h"

#include <cstdio>

#include <unistd.h>

#include <fmt/format.h>

#include "engine/engine.h"
#include "kv/kv_policy.h"

namespace kvlm {
namespace {

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
  per_tier("kvlm_kv_tier_up", "gauge", "1 while the KV tier answers, 0 while it is down (its misses are recomputed).",
           [](const TierStats& t) { return t.up ? 1 : 0; });
  per_tier("kvlm_kv_tier_lookups_total", "counter", "Lookups sent to the KV tier.", [](const TierStats& t) { return t.num_lookups; });
  per_tier("kvlm_kv_tier_hit_blocks_total", "counter", "KV blocks the tier returned valid.",
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
  w.metric("kvlm_kv_tier_hit_tokens_total", "counter", "Prompt tokens loaded from a KV tier instead of computed.",
           static_cast<double>(m.num_tier_hit_tokens));
  w.metric("kvlm_kv_tier_write_drops_total", "counter", "Full blocks the tiers' write queue refused (full or duplicate).",
           static_cast<double>(m.num_tier_writes_dropped));
  w.metric("kvlm_requests_loading", "gauge", "Requests waiting for a KV tier lookup.", m.num_loading);
  w.tier_latency("kvlm_kv_tier_load_latency_seconds", "Time of one lookup in the tier.", m.tiers);
}

}  // namespace

std::string prometheus_text(const EngineMetrics& m, const std::string& model_name) {
  Writer w(model_name);
  w.metric("kvlm_requests_running", "gauge", "Requests in the running batch.", m.num_running);
  w.metric("kvlm_requests_waiting", "gauge", "Requests waiting to be scheduled.", m.num_waiting);
  w.metric("kvlm_kv_blocks_capacity", "gauge", "KV cache blocks in the pool (used or free).", m.num_kv_blocks);
  w.metric("kvlm_kv_blocks_used", "gauge", "KV cache blocks referenced by requests.", m.num_kv_blocks_used);
  w.metric("kvlm_kv_blocks_peak", "gauge", "Most KV cache blocks referenced at once since start.", m.peak_kv_blocks_used);
  w.metric("kvlm_kv_usage_ratio", "gauge", "Fraction of KV cache blocks in use (0 to 1).",
           m.num_kv_blocks ? static_cast<double>(m.num_kv_blocks_used) / m.num_kv_blocks : 0.0);
  w.metric("kvlm_kv_block_size_tokens", "gauge", "Token slots per KV cache block.", m.block_size);
  w.metric("kvlm_prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.",
           static_cast<double>(m.num_prefix_query_tokens));
  w.metric("kvlm_prefix_cache_hits_total", "counter", "Prompt tokens served by the prefix cache.",
           static_cast<double>(m.num_prefix_hit_tokens));
  w.metric("kvlm_prefix_cache_evictions_total", "counter", "Cached KV blocks evicted for reuse.",
           static_cast<double>(m.num_prefix_evicted_blocks));
  w.metric("kvlm_preemptions_total", "counter", "Requests preempted for lack of KV blocks.",
           static_cast<double>(m.num_preemptions));
  w.metric("kvlm_prompt_tokens_total", "counter", "Prompt tokens submitted.", static_cast<double>(m.num_prompt_tokens));
  w.metric("kvlm_generation_tokens_total", "counter", "Tokens generated.", static_cast<double>(m.num_generated_tokens));
  w.metric("kvlm_engine_steps_total", "counter", "Engine steps run.", static_cast<double>(m.num_steps));
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

std::string server_metrics_text(const RejectionCounts& r, const std::string& model_name) {
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
  w.labelled("kvlm_server_rejected_total", "counter", "Requests refused with 503 at a server limit, by limit.",
             {{"connections", static_cast<double>(r.num_connections)}, {"queue", static_cast<double>(r.num_queue)}},
             "limit");
  return w.take();
}

}  // namespace kvlm
