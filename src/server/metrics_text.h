// Prometheus text exposition (format 0.0.4) of the engine's metrics.
#pragma once

#include <cstdint>
#include <optional>
#include <map>
#include <string>
#include <vector>

#include "server/lora_registry.h"

namespace kvlm {

struct EngineMetrics;

namespace constrain {
struct GrammarStats;
}  // namespace constrain

std::string prometheus_text(const EngineMetrics& m, const std::string& model_name);

// Other engines' names for the same values (--metrics-compat), for the
// schedulers and routers that read those names: llm-d's endpoint picker and
// the Gateway API Inference Extension (queue, running, KV use, block size and
// count), vLLM's and SGLang's routers.
enum class MetricsCompat { kVllm, kSglang };
// "vllm" / "sglang" -> the compat; nullopt for another name.
std::optional<MetricsCompat> parse_metrics_compat(const std::string& name);
std::string compat_metrics_text(const EngineMetrics& m, const std::string& model_name, MetricsCompat compat);

// Requests the server refused at its limits (503 + Retry-After), by limit.
struct RejectionCounts {
  int64_t num_connections = 0;  // --max-connections: the connection was answered and closed
  int64_t num_queue = 0;        // --max-queued-requests: a generation request found the queue full
  int64_t num_body_memory = 0;  // --body-mem: the parsed bodies being handled held it all
};

// The server's own state, beside the engine's.
struct ServerSeries {
  RejectionCounts rejected;
  const constrain::GrammarStats* grammars = nullptr;
  int64_t num_heap_trims = 0;
  int64_t body_memory_bytes = 0;  // held by the parsed bodies of requests being handled
  int64_t body_memory_budget_bytes = 0;
};
// The server's own series, appended to prometheus_text's: its resident
// memory and the heap trims that keep it down, the refusals, the parsed
// bodies' memory, and its grammars' memory, compilations and cache.
std::string server_metrics_text(const ServerSeries& s, const std::string& model_name);

// The LoRA adapters' series (docs/lora.md): how many are loaded, and per
// adapter its requests and tokens; with vllm, vLLM's lora_requests_info too
// (value: the scrape's unix time; labels max_lora, running_lora_adapters,
// waiting_lora_adapters), which llm-d and the inference gateway read.
struct LoraSeries {
  size_t max_loras = 0;
  size_t num_loaded = 0;
  std::vector<std::string> running;  // adapters running requests hold now
  std::map<std::string, LoraUsage> usage;
};
std::string lora_metrics_text(const LoraSeries& s, const std::string& model_name, bool vllm);

}  // namespace kvlm
