// Prometheus text exposition (format 0.0.4) of the engine's metrics.
#pragma once

#include <cstdint>
#include <string>

namespace kvlm {

struct EngineMetrics;

std::string prometheus_text(const EngineMetrics& m, const std::string& model_name);

// Requests the server refused at its limits (503 + Retry-After), by limit.
struct RejectionCounts {
  int64_t num_connections = 0;  // --max-connections: the connection was answered and closed
  int64_t num_queue = 0;        // --max-queued-requests: a generation request found the queue full
};
// The server's own series, appended to prometheus_text's.
std::string server_metrics_text(const RejectionCounts& r, const std::string& model_name);

}  // namespace kvlm
