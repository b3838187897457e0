// kvlm serve: the OpenAI-compatible HTTP server over one engine.
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "apps/commands.h"
#include "apps/engine_options.h"
#include "common/error.h"
#include "model/model.h"
#include "server/server.h"

namespace kvlm::apps {

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
  CLI11_PARSE(app, argc, argv);
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

  std::thread waiter([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    fmt::print(stderr, "kvlm serve: signal {}, shutting down\n", sig);
    server.stop();
  });
  server.run();
  // run() also returns if listening failed; wake the waiter either way.
  pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
  return 0;
}

}  // namespace kvlm::apps
