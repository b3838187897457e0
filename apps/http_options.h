// The transport's flags, shared by kvlm serve and kvlm router
// (docs/server.md "Server limits"): connections, deadlines, sizes, threads.
#pragma once

#include <cstdint>

#include <CLI/CLI.hpp>

#include "wire/http/http_server.h"

namespace kvlm::apps {

// Millisecond flags are read into this and applied by apply_http_flags().
struct HttpFlags {
  int64_t header_timeout_ms = 10000;
  int64_t keep_alive_timeout_ms = 5000;
  int64_t tls_handshake_timeout_ms = 10000;
  int64_t body_timeout_ms = 10000;
  int64_t write_timeout_ms = 30000;
};

// `threads_help` says what --http-threads defaults to for this command.
void add_http_options(CLI::App& app, http::ServerLimits& limits, HttpFlags& flags, const std::string& threads_help);
// The parsed millisecond flags into `limits`; max_connections is fitted
// under this process's open-file limit (raised to its hard limit first),
// with a warning when it had to shrink.
void apply_http_flags(const HttpFlags& flags, http::ServerLimits& limits);

}  // namespace kvlm::apps
