// kvlm's HTTP server: the OpenAI-compatible API over the engine.
//
//   POST /v1/completions        text or token-id prompt, streaming (SSE) or not
//   POST /v1/chat/completions   messages through the model's chat template
//   GET  /v1/models             the served model (one entry per served name)
//   GET  /v1/models/{id}        one of them, or 404
//   POST /tokenize, /detokenize the model's tokenizer
//   GET  /health                200 once the engine is up, 503 while draining
//   GET  /metrics               Prometheus exposition of the engine's metrics
//   GET  /v1/status             the engine's load as JSON (the chat page's live panel)
//   GET  /slots                 llama.cpp's slots: --max-seqs of them, what each last ran
//   POST /slots/{id}?action=    save, restore or erase a slot's KV (server/slots.h)
//   GET  /                      the chat page (web/, embedded in the binary)
//
// Errors are OpenAI-style JSON ({"error": {"message", "type", "param",
// "code"}}) with the matching status. With an API key, /v1/* and the
// tokenizer routes need "Authorization: Bearer <key>".
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/hash.h"
#include "server/lora_registry.h"
#include "server/metrics_text.h"
#include "wire/http/http_server.h"

namespace kvlm {

class Engine;

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8080;                  // 0: any free port (see Server::port())
  // API keys (wire/http/api_keys.h): --api-key values (repeatable) and
  // --api-key-file, reloaded by reload_api_keys(); none: no authentication.
  std::vector<std::string> api_keys;
  std::string api_key_file;
  std::string metrics_key;          // set: /metrics and /v1/status need this key
  std::string ssl_cert_file;        // both set: HTTPS (PEM files)
  std::string ssl_key_file;
  // The names the model is served under (--served-model-name, repeatable;
  // at least one): a request may name any of them (another is a 404
  // model_not_found; none is the first), /v1/models lists them all, and the
  // first labels the metrics.
  std::vector<std::string> model_names;
  // Origins whose browser pages may call the API (docs/server.md "CORS");
  // "*": any. Empty: no CORS headers.
  std::vector<std::string> cors_origins;
  std::optional<std::string> chat_template_file;  // overrides the model's template
  // The transport's limits (docs/server.md "Server limits"): connections,
  // deadlines, head and body sizes, threads. handler_threads 0: enough for
  // every running and queued request to be parsed at once.
  http::ServerLimits http{.handler_threads = 0};
  // Limits that keep an overloaded server answering: past it a request gets
  // 503 with Retry-After and an OpenAI error.
  int max_queued_requests = 256;         // generation requests waiting beyond the engine's max_seqs; < 0: no cap
  double request_timeout_s = 600;        // per generation request, from submission; <= 0: none
  int retry_after_s = 1;                 // the Retry-After of those 503s
  // A stream with no event for this long gets an SSE comment line, so idle
  // proxies keep it open and a gone client is noticed.
  std::chrono::milliseconds sse_heartbeat{1000};
  // A thinking model's thinking (<think> ... </think>) is answered apart
  // (reasoning_content) unless this is false (--reasoning-format none); a
  // request's reasoning_format wins.
  bool separate_reasoning = true;
  // /v1/embeddings' pooling (--pooling): "mean", "last", or "" for the
  // model's pooling_type, else the last token's.
  std::string pooling;
  // A request's unset sampling fields take the model's defaults
  // (generation_config.json; server/sampling_defaults.h) unless this is false
  // (--generation-config none: OpenAI's defaults).
  bool model_sampling_defaults = true;
  // /metrics also gives these engines' names for the same values
  // (--metrics-compat; server/metrics_text.h), for their schedulers and routers.
  std::vector<MetricsCompat> metrics_compat;
  // KV chunks (docs/kv-chunks.md, --kv-chunks-auto): in chat and Messages,
  // every user and tool message (tool_result) of at least this many tokens
  // is a KV chunk, marked or not; 0: only the marked ones.
  int32_t kv_chunks_auto = 0;
  // The KV tier's Redis (--kv-redis; "": none): stored Responses API
  // responses are kept there too, so servers sharing it continue each
  // other's conversations (response_store.h).
  std::string responses_redis_url;
  std::string responses_redis_password_file;
  int64_t responses_redis_ttl_s = 3600;
  // Grammars (docs/structured-outputs.md "Memory"): the bytes every
  // compilation and compiled grammar may hold together (0: a sixteenth of
  // the machine's memory, 64 MiB to 1 GiB), compilations at once (0: half
  // the cores), and how long a request waits for a compilation slot.
  int64_t grammar_mem_bytes = 0;
  int grammar_compilations = 0;
  std::chrono::milliseconds grammar_wait{2000};
  // What the parsed bodies of the requests being handled may hold together
  // (docs/server.md "Server limits"; 0: as grammar_mem_bytes's default).
  int64_t body_mem_bytes = 0;
  // LoRA adapters served by name beside the base (docs/lora.md): those of
  // --lora NAME=PATH, loaded already, at most max_loras at once. With
  // load_lora set (--allow-runtime-lora), POST /v1/load_lora_adapter reads
  // more through it and /v1/unload_lora_adapter drops them.
  std::vector<ServedLora> loras;
  size_t max_loras = 8;
  std::function<std::shared_ptr<const LoraAdapter>(const std::string& path)> load_lora;
  // Slot files (docs/slots.md, --slot-save-path): the folder that
  // POST /slots/{id}?action=save writes and action=restore reads ("": both
  // refused), made at start if missing, and the KV namespace
  // (kvstore/kv_namespace.h: model, KV type, block size) a file must carry
  // to be restored here.
  std::string slot_save_path;
  Hash128 slot_namespace{};
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
  // Reads the API keys again (SIGHUP): requests in flight are unaffected.
  // Throws Error for a key file that cannot be read or parsed (the keys in
  // use stay).
  void reload_api_keys();
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
