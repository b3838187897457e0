// kvlm's HTTP server: the OpenAI-compatible API over the engine.
//
//   POST /v1/completions        text or token-id prompt, streaming (SSE) or not
//   POST /v1/chat/completions   messages through the model's chat template
//   GET  /v1/models             the served model
//   POST /tokenize, /detokenize the model's tokenizer
//   GET  /health                200 once the engine is up, 503 while draining
//   GET  /metrics               Prometheus exposition of the engine's metrics
//   GET  /v1/status             the engine's load as JSON (the chat page's live panel)
//   GET  /                      the chat page (web/, embedded in the binary)
//
// Errors are OpenAI-style JSON ({"error": {"message", "type", "param",
// "code"}}) with the matching status. With an API key, /v1/* and the
// tokenizer routes need "Authorization: Bearer <key>".
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>

namespace kvlm {

class Engine;

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8080;                  // 0: any free port (see Server::port())
  std::string api_key;              // empty: no authentication
  std::string model_name;           // reported in responses and /v1/models
  int num_http_threads = 0;         // 0: enough for every running and queued request
  std::optional<std::string> chat_template_file;  // overrides the model's template
  size_t max_body_bytes = 32 << 20;      // a larger request body gets 413
  // Limits that keep an overloaded server answering (README "Server limits").
  // Past either cap a request gets 503 with Retry-After and an OpenAI error.
  size_t max_connections = 1024;         // connections served or waiting for a thread; 0: no cap
  int max_queued_requests = 256;         // generation requests waiting beyond the engine's max_seqs; < 0: no cap
  double request_timeout_s = 600;        // per generation request, from submission; <= 0: none
  int retry_after_s = 1;                 // the Retry-After of those 503s
  // A stream with no event for this long gets an SSE comment line, so idle
  // proxies keep it open and a gone client is noticed.
  std::chrono::milliseconds sse_heartbeat{1000};
};

class Server {
 public:
  // Throws Error(kInvalidArgument) for a chat template that does not parse.
  Server(Engine& engine, ServerConfig config);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the listening socket; throws Error(kUnavailable) if it cannot.
  void bind();
  int port() const;
  // Serves until stop() (from another thread or a signal handler's thread).
  void run();
  void stop();
  // Graceful shutdown, called from another thread while run() serves: from
  // now on /health answers 503 and new generation requests get 503; waits
  // up to `timeout` for running ones to finish, cancels the rest (their
  // streams end with a finish reason and [DONE]) and waits for their
  // answers to be written. Returns how many were cancelled. Call stop() after.
  size_t drain(std::chrono::milliseconds timeout);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvlm
