// Prometheus text exposition (format 0.0.4) of the engine's metrics.
#pragma once

#include <string>

namespace kvlm {

struct EngineMetrics;

std::string prometheus_text(const EngineMetrics& m, const std::string& model_name);

}  // namespace kvlm
