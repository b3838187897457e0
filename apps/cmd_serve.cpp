// kvlm serve: the OpenAI-compatible HTTP server over one engine.
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "apps/commands.h"
#include "apps/engine_options.h"
#include "common/error.h"
#include "engine/engine.h"
#include "model/model.h"
#include "server/server.h"

namespace kvlm::apps {

namespace {

// One line on how the drain ended. Cancelled requests leave the engine at
// its next step; wait briefly for that so the block count is final.
void report_drained(const Engine& engine, size_t num_cancelled) {
  EngineMetrics m = engine.metrics();
  for (int i = 0; i < 200 && (m.num_running + m.num_waiting > 0 || m.num_kv_blocks_used > 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    m = engine.metrics();
  }
  fmt::print(stderr, "kvlm serve: drained ({} requests cancelled); requests left {}, KV blocks in use {}\n",
             num_cancelled, m.num_running + m.num_waiting, m.num_kv_blocks_used);
  std::fflush(stderr);
}

// Limits that keep an overloaded server answering (README "Server limits").
void add_limit_options(CLI::App& app, ServerConfig& sc) {
  app.add_option("--max-connections", sc.max_connections,
                 "connections served or waiting at once; past it 503 + Retry-After (0: no cap)")
      ->capture_default_str();
  app.add_option("--max-queued-requests", sc.max_queued_requests,
                 "generation requests that may wait beyond --max-seqs; past it 503 + Retry-After (-1: no cap)")
      ->capture_default_str()
      ->check(CLI::Range(-1, 1 << 20));
  app.add_option("--request-timeout", sc.request_timeout_s,
                 "seconds a generation request may take from submission; then it fails and frees its KV (0: none)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-request-bytes", sc.max_body_bytes, "largest request body; larger gets 413")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1024}, size_t{1} << 34));
  app.add_option("--retry-after", sc.retry_after_s, "seconds in the Retry-After of the limits' 503s")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600));
}

}  // namespace

int cmd_serve(int argc, char** argv) {
  CLI::App app{"Serve the OpenAI-compatible API (completions, chat completions, SSE, metrics)", "kvlm serve"};
  EngineOptions eo;
  add_engine_options(app, eo);
  ServerConfig sc;
  app.add_option("--host", sc.host, "address to listen on")->capture_default_str();
  app.add_option("--port", sc.port, "port (0: any free port)")->capture_default_str();
  app.add_option("--api-key", sc.api_key, "require 'Authorization: Bearer KEY' on /v1/* (default: $KVLM_API_KEY)");
  app.add_option("--served-model-name", sc.model_name, "model name in responses (default: the file's general.name)");
  app.add_option("--chat-template-file", sc.chat_template_file, "Jinja chat template to use instead of the model's");
  app.add_option("--http-threads", sc.num_http_threads, "HTTP worker threads (default: enough for every request)");
  add_limit_options(app, sc);
  int64_t heartbeat_ms = 1000;
  app.add_option("--sse-heartbeat-ms", heartbeat_ms, "idle time before a stream gets an SSE keep-alive comment")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{3600000}));
  double drain_timeout_s = 30;
  app.add_option("--drain-timeout", drain_timeout_s,
                 "on SIGTERM/SIGINT, seconds to let running requests finish before cancelling them")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);
  sc.sse_heartbeat = std::chrono::milliseconds(heartbeat_ms);
  if (sc.api_key.empty())
    if (const char* key = std::getenv("KVLM_API_KEY")) sc.api_key = key;

  // SIGINT/SIGTERM stop the server from a waiting thread (a handler must not
  // touch it); a client that hangs up must not kill us with SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);  // inherited by every thread started below

  auto engine = start_engine(eo);
  if (sc.model_name.empty()) {
    sc.model_name = engine->model().config().name;
    if (sc.model_name.empty()) sc.model_name = std::filesystem::path(eo.model_path).stem().string();
  }
  Server server(*engine, sc);
  server.bind();
  fmt::print(stderr, "kvlm serve: listening on http://{}:{} (model {}, context {}, KV pool {} blocks of {})\n",
             sc.host, server.port(), sc.model_name, engine->max_model_len(), engine->metrics().num_kv_blocks,
             engine->config().block_size);
  std::fflush(stderr);

  // First signal: drain (health 503, new work 503, running work finishes or
  // is cancelled at the deadline), then stop. Second signal: exit at once.
  std::atomic<bool> exiting{false};
  std::thread drainer;
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    if (exiting) return;
    fmt::print(stderr, "kvlm serve: signal {}, draining for up to {} s (a second signal exits at once)\n", sig,
               drain_timeout_s);
    drainer = std::thread([&] {
      const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(drain_timeout_s * 1000));
      const size_t num_cancelled = server.drain(timeout);
      report_drained(*engine, num_cancelled);
      server.stop();
    });
    sigwait(&stop_signals, &sig);
    if (exiting) return;
    fmt::print(stderr, "kvlm serve: second signal {}, exiting now\n", sig);
    std::fflush(stderr);
    std::_Exit(128 + sig);
  });
  server.run();
  // run() also returns if listening failed; wake the waiter either way.
  exiting = true;
  pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
  if (drainer.joinable()) drainer.join();
  return 0;
}

}  // namespace kvlm::apps
