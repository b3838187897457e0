#include "common/log.h"

#include <atomic>
#include <cstdio>
#include <string>

namespace kvlm {
namespace {
// The one process-wide setting kvlm keeps: the log threshold, set once by main.
std::atomic<LogLevel> g_level{LogLevel::kWarn};
}  // namespace

void set_log_level(LogLevel level) { g_level.store(level); }
LogLevel log_level() { return g_level.load(std::memory_order_relaxed); }

void log_line(LogLevel level, std::string_view message) {
  static constexpr const char* kNames[] = {"debug", "info", "warn", "error", ""};
  std::string line = fmt::format("kvlm {}: {}\n", kNames[static_cast<int>(level)], message);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace kvlm
