// kvlm router: one OpenAI-compatible endpoint in front of many kvlm serve
// workers (docs/router.md). It routes each request by the KV blocks each
// worker really holds (their KV events) against their load, retries a
// request that has not been answered on another worker, and continues a
// stream whose worker dies on another one, so its client sees one
// uninterrupted stream.
//
//   POST /v1/completions, /v1/chat/completions   routed (SSE relayed as it comes)
//   GET  /v1/models, POST /tokenize, /detokenize  any worker that is up
//   GET  /v1/status                               the workers and their load (JSON)
//   GET  /health                                  200 while some worker is up
//   GET  /metrics                                 the router's own metrics
//   GET  /                                        the chat page
//
// It never loads a model's weights: the model file, when given, supplies
// the tokenizer and chat template that kv-aware routing needs.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "router/model_host.h"
#include "router/policy.h"
#include "router/registry.h"
#include "router/workers.h"
#include "wire/http/http_server.h"

namespace kvlm::router {

class PromptReader;

struct RouterConfig {
  std::string host = "127.0.0.1";
  int port = 8080;                       // 0: any free port
  std::vector<std::string> workers;      // static members: http://HOST:PORT
  std::optional<RegistryConfig> registry;  // members that register in Redis (router/registry.h)
  std::vector<std::string> api_keys;     // clients' keys (wire/http/api_keys.h); none: no key needed
  std::string api_key_file;              // clients' keys with names and limits, reloaded by reload_api_keys()
  std::string metrics_key;               // set: /metrics needs it
  std::string ssl_cert_file, ssl_key_file;  // both: HTTPS
  std::string worker_api_key;            // the workers' key (empty: none)
  std::vector<std::string> cors_origins; // as kvlm serve's --cors-origin (wire/http/front.h)
  Policy policy = Policy::kKvAware;
  PolicyWeights weights;
  HealthConfig health;
  int32_t max_attempts = 3;              // workers one request (or one resume) may try
  // The transport's limits (connections, deadlines, sizes, threads): a
  // handler thread is held by a request answered whole while its worker
  // answers; a stream holds none.
  http::ServerLimits http{.handler_threads = 256};
  // --body-mem: what the parsed JSON of the requests being handled may hold
  // together (wire/http/body_memory.h); the router parses every body it
  // routes (the prompt, the stream flag).
  int64_t body_mem_bytes = int64_t{256} << 20;
  int retry_after_s = 1;
  double request_timeout_s = 600;        // a request answered whole must be answered by then
  // A stream's worker that sends no byte for this long is taken for dead
  // (kvlm serve sends a keep-alive comment every second while it is quiet).
  std::chrono::milliseconds stream_idle_timeout{15000};
  std::chrono::milliseconds sse_heartbeat{1000};
  // Set: the models are started on demand by this host (not owned; it
  // outlives the router), which adds and removes their workers
  // (model_host.h); no --workers or registry needed.
  ModelHost* model_host = nullptr;
};

class Router {
 public:
  // Throws Error(kInvalidArgument) for a configuration that cannot work.
  Router(RouterConfig config, std::unique_ptr<PromptReader> prompts);
  ~Router();
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  void bind();  // throws Error(kUnavailable)
  // Reads the client API keys again (SIGHUP); throws Error, keeping the keys in use.
  void reload_api_keys();
  int port() const;
  // Serves until stop(); starts the health checks and KV-event readers.
  void run();
  void stop();

  // Membership (the static list is added at construction).
  void add_worker(const std::string& url);
  // A worker that serves exactly `models` (a model host's).
  void add_worker(const std::string& url, std::set<std::string> models);
  // Requests the router has on the worker now (0 for an unknown one).
  int32_t requests_in_flight(const std::string& url) const;
  void remove_worker(const std::string& url);
  std::vector<std::string> worker_urls() const;

 private:
  // The registry's members now: new ones added, gone ones removed (static
  // members stay).
  void sync_registered(const std::vector<std::string>& urls);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvlm::router
