#include "server/metrics_text.h"

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
  std::string take() { return std::move(out_); }

 private:
  void header(const char* name, const char* type, const char* help) {
    out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  std::string labels_;
  std::string out_;
};

}  // namespace

std::string prometheus_text(const EngineMetrics& m, const std::string& model_name) {
  Writer w(model_name);
  w.metric("kvlm_requests_running", "gauge", "Requests in the running batch.", m.num_running);
  w.metric("kvlm_requests_waiting", "gauge", "Requests waiting to be scheduled.", m.num_waiting);
  w.metric("kvlm_kv_blocks_total", "gauge", "KV cache blocks in the pool.", m.num_kv_blocks);
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
  w.labelled("kvlm_requests_finished_total", "counter", "Finished requests by finish reason.",
             {{"stop", static_cast<double>(m.num_requests_stopped)},
              {"length", static_cast<double>(m.num_requests_length)},
              {"abort", static_cast<double>(m.num_requests_aborted)}},
             "finished_reason");
  std::vector<std::pair<std::string, double>> evicted;
  for (KvPolicyKind k : all_kv_policies())
    evicted.emplace_back(kv_policy_name(k), static_cast<double>(m.num_kv_evicted_tokens[static_cast<size_t>(k)]));
  w.labelled("kvlm_kv_evicted_tokens_total", "counter", "KV tokens dropped by per-sequence budgets, by policy.",
             evicted, "policy");
  w.histogram("kvlm_kv_resident_tokens", "Most KV tokens a finished request held at once.", m.resident_tokens);
  w.histogram("kvlm_time_to_first_token_seconds", "Time from arrival to the first generated token.", m.ttft_s);
  w.histogram("kvlm_inter_token_latency_seconds", "Time between consecutive generated tokens.", m.itl_s);
  w.histogram("kvlm_e2e_request_latency_seconds", "Time from arrival to finish.", m.e2e_s);
  w.histogram("kvlm_request_queue_time_seconds", "Time from arrival to first scheduling.", m.queue_s);
  return w.take();
}

}  // namespace kvlm
