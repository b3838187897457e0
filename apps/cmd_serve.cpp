// kvlm serve: the OpenAI-compatible HTTP server over one engine.
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "apps/cli_parse.h"
#include "apps/commands.h"
#include "apps/engine_options.h"
#include "apps/front_door_options.h"
#include "apps/http_options.h"
#include "apps/kv_events_options.h"
#include "apps/lora_options.h"
#include "apps/stop_signals.h"
#include "common/error.h"
#include "engine/engine.h"
#include "model/model.h"
#include "router/registry.h"
#include "router/upstream.h"
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

// Limits that keep an overloaded server answering (docs/server.md "Server limits").
void add_limit_options(CLI::App& app, ServerConfig& sc) {
  app.add_option("--max-queued-requests", sc.max_queued_requests,
                 "generation requests that may wait beyond --max-seqs; past it 503 + Retry-After (-1: no cap)")
      ->capture_default_str()
      ->check(CLI::Range(-1, 1 << 20));
  app.add_option("--request-timeout", sc.request_timeout_s,
                 "seconds a generation request may take from submission; then it fails and frees its KV (0: none)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--body-mem", sc.body_mem_bytes,
                 "bytes the parsed JSON of the requests being handled may hold together; past it 503, a body that "
                 "alone needs more 413 (K/M/G suffixes; default: a sixteenth of the machine's memory, 64 MiB to 1 GiB)")
      ->transform(CLI::AsSizeValue(false))
      ->check(CLI::Range(int64_t{1} << 20, int64_t{1} << 40));
  app.add_option("--retry-after", sc.retry_after_s, "seconds in the Retry-After of the limits' 503s")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600));
}

// The grammars' memory and compilations (docs/structured-outputs.md "Memory").
void add_grammar_options(CLI::App& app, ServerConfig& sc, int64_t& wait_ms) {
  app.add_option("--grammar-mem", sc.grammar_mem_bytes,
                 "bytes every grammar compilation and compiled grammar may hold together, a quarter of it one grammar; "
                 "past it 503 (K/M/G suffixes; default: a sixteenth of the machine's memory, 64 MiB to 1 GiB)")
      ->transform(CLI::AsSizeValue(false))
      ->check(CLI::Range(int64_t{1} << 20, int64_t{1} << 40));
  app.add_option("--grammar-compilations", sc.grammar_compilations,
                 "grammar compilations at once; others wait up to --grammar-wait-ms, then 503 (default: half the cores)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--grammar-wait-ms", wait_ms, "how long a request waits for a grammar compilation slot")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{600000}));
}

// The URL a registered server (or its KV events' topic, `what`) names:
// --advertise, or its listening address (a wildcard address says nothing:
// --advertise is needed then).
router::WorkerAddress advertised_address(const std::string& advertise, const std::string& host, int port,
                                         const char* what = "--register") {
  if (!advertise.empty()) return router::parse_worker_url(advertise);
  if (host == "0.0.0.0" || host == "::" || host.empty())
    throw_error(ErrorCode::kInvalidArgument, "{} with --host {}: give --advertise http://ADDRESS:{}", what, host, port);
  return {host, port, fmt::format("http://{}:{}", host, port)};
}

// Every flag of kvlm serve, as parsed, before it becomes a ServerConfig.
struct ServeFlags {
  EngineOptions engine;
  ServerConfig server;
  FrontDoorFlags door;
  HttpFlags http;
  ZmqEventFlags zmq;
  std::string reasoning_format = "separate";
  std::string generation_config = "auto";
  int64_t grammar_wait_ms = 2000;
  int64_t heartbeat_ms = 1000;
  std::vector<std::string> metrics_compat;
  router::RegistryConfig registry;
  std::string advertise;
  int64_t register_ttl_ms = 3000;
  double drain_timeout_s = 30;
  LoraFlags loras;  // --lora [NAME=]PATH[:SCALE], --lora-type
  bool allow_runtime_lora = false;
};

// LoRA adapters served beside the base (docs/lora.md).
void add_serve_lora_options(CLI::App& app, ServeFlags& f) {
  add_lora_options(app, f.loras,
                         "LoRA adapter [NAME=]PATH[:SCALE] served as model NAME (default: the file's name); repeatable");
  app.add_option("--max-loras", f.server.max_loras, "LoRA adapters loaded at most at once")->capture_default_str();
  app.add_flag("--allow-runtime-lora", f.allow_runtime_lora,
               "POST /v1/load_lora_adapter and /v1/unload_lora_adapter load and drop adapters by path (under the "
               "API keys)");
}

// How answers are shaped when a request leaves it open: thinking, sampling
// defaults, embeddings' pooling.
void add_answer_options(CLI::App& app, ServeFlags& f) {
  app.add_option("--reasoning-format", f.reasoning_format,
                 "a thinking model's <think> section: 'separate' answers it in reasoning_content, 'none' leaves it "
                 "in the content (a request's reasoning_format wins)")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "separate"}));
  app.add_option("--generation-config", f.generation_config,
                 "'auto': sampling fields a request leaves unset take the model's defaults (generation_config.json, "
                 "GGUF general.sampling.*); 'none': OpenAI's (temperature 1, top_p 1)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "none"}));
  app.add_option("--pooling", f.server.pooling,
                 "/v1/embeddings: pool a prompt's final hidden states by their mean or the last token's "
                 "(default: the model's pooling_type, else last)")
      ->check(CLI::IsMember({"mean", "last"}));
}

// Registration in a router's registry (docs/router.md).
void add_registry_options(CLI::App& app, ServeFlags& f) {
  app.add_option("--register", f.registry.url,
                 "register in a router's registry: redis://HOST:PORT[/DB] or redis+cluster://HOST:PORT,...");
  app.add_option("--advertise", f.advertise, "the URL routers reach this server at (default: http://HOST:PORT)");
  app.add_option("--registry-name", f.registry.name, "the fleet's name in the registry")->capture_default_str();
  app.add_option("--registry-password-file", f.registry.password_file, "the registry's Redis password (first line)");
  app.add_option("--register-ttl-ms", f.register_ttl_ms, "the registration lives this long without a heartbeat")
      ->capture_default_str();
}

// The flags in the order --help lists them.
void add_serve_options(CLI::App& app, ServeFlags& f) {
  add_engine_options(app, f.engine);
  ServerConfig& sc = f.server;
  app.add_option("--host", sc.host, "address to listen on")->capture_default_str();
  app.add_option("--port", sc.port, "port (0: any free port)")->capture_default_str();
  add_front_door_options(app, f.door);
  add_serve_lora_options(app, f);
  app.add_option("--served-model-name", sc.model_names,
                 "a name requests may give the model; repeat for aliases (default: the file's general.name)")
      ->take_all()
      ->allow_extra_args(false);
  app.add_option("--cors-origin", sc.cors_origins,
                 "let browser pages of this origin (e.g. http://localhost:3000; '*': any) call the API; repeatable "
                 "(default: none)")
      ->allow_extra_args(false);
  app.add_option("--chat-template-file", sc.chat_template_file, "Jinja chat template to use instead of the model's");
  add_limit_options(app, sc);
  add_http_options(app, sc.http, f.http, "default: enough to parse every running and queued request at once");
  add_answer_options(app, f);
  add_grammar_options(app, sc, f.grammar_wait_ms);
  app.add_option("--kv-chunks-auto", sc.kv_chunks_auto,
                 "KV chunks: every user and tool message (tool_result) of at least N tokens is one, marked or not "
                 "(docs/kv-chunks.md; 0: only the marked ones)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 30));
  app.add_option("--slot-save-path", sc.slot_save_path,
                 "folder of llama.cpp's slot files: POST /slots/{id}?action=save writes a slot's tokens and the KV "
                 "of their cached blocks there, action=restore puts them back into the prefix cache (default: none, "
                 "both refused)");
  app.add_flag("--kv-events", f.engine.kv_events,
               "publish the prefix cache's changes on GET /v1/kv/events, for kvlm router's kv-aware routing");
  add_zmq_event_options(app, f.zmq);
  app.add_option("--metrics-compat", f.metrics_compat,
                 "/metrics also gives vLLM's (vllm) or SGLang's (sglang) names for the queue, running requests, KV use "
                 "and block counts, for the schedulers and routers that read them (llm-d, vllm-router); repeatable")
      ->check(CLI::IsMember({"vllm", "sglang"}))
      ->allow_extra_args(false);
  app.add_option("--sse-heartbeat-ms", f.heartbeat_ms, "idle time before a stream gets an SSE keep-alive comment")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{3600000}));
  add_registry_options(app, f);
  app.add_option("--drain-timeout", f.drain_timeout_s,
                 "on SIGTERM/SIGINT, seconds to let running requests finish before cancelling them")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
}

// The parsed flags folded into the server's config. The front door's flags
// are checked here, before the model loads, so a mistake costs no wait.
void finish_server_config(ServeFlags& f) {
  ServerConfig& sc = f.server;
  apply_http_flags(f.http, sc.http);
  sc.sse_heartbeat = std::chrono::milliseconds(f.heartbeat_ms);
  for (const std::string& c : f.metrics_compat) sc.metrics_compat.push_back(*parse_metrics_compat(c));
  sc.separate_reasoning = f.reasoning_format == "separate";
  sc.model_sampling_defaults = f.generation_config == "auto";
  sc.responses_redis_url = f.engine.tiers.redis;
  sc.responses_redis_password_file = f.engine.tiers.redis_password_file;
  sc.responses_redis_ttl_s = f.engine.tiers.redis_ttl_s;
  sc.grammar_wait = std::chrono::milliseconds(f.grammar_wait_ms);
  apply_key_environment(f.door);
  apply_front_door_flags(f.door, sc);
  check_zmq_event_flags(f.zmq);
  f.engine.kv_event_contents = f.zmq.on();
}

// Without --served-model-name the model answers to its general.name, else
// to its file's name.
void default_model_name(ServerConfig& sc, const Engine& engine, const std::string& model_path) {
  if (!sc.model_names.empty()) return;
  std::string name = engine.model().config().name;
  if (name.empty()) name = std::filesystem::path(model_path).stem().string();
  sc.model_names.push_back(std::move(name));
}

// What a slot file must have been saved under to be restored here: the
// tiers' namespace (the weights' digest, the KV type, the block size), so a
// file of another model or KV type is refused, never loaded.
Hash128 slot_namespace(const Engine& engine, const EngineOptions& o) {
  return kv_namespace_fingerprint(kv_namespace_spec(engine.model().gguf(), o.kv_type, o.block_size));
}

void print_listening(const ServerConfig& sc, const Server& server, const Engine& engine) {
  fmt::print(stderr, "kvlm serve: listening on {}://{}:{} (model {}, context {}, KV pool {} blocks of {})\n",
             sc.ssl_cert_file.empty() ? "http" : "https", sc.host, server.port(), fmt::join(sc.model_names, ", "),
             engine.max_model_len(), engine.metrics().num_kv_blocks, engine.config().block_size);
  std::fflush(stderr);
}

// Runs the server until it stops. First signal: drain (health 503, new work
// 503, running work finishes or is cancelled at the deadline), then stop.
// Second signal: exit at once.
void serve_until_stopped(Server& server, const Engine& engine, router::RegistryMember* member,
                         const sigset_t& stop_signals, double drain_timeout_s) {
  std::atomic<bool> exiting{false};
  std::thread drainer;
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    if (exiting) return;
    fmt::print(stderr, "kvlm serve: signal {}, draining for up to {} s (a second signal exits at once)\n", sig,
               drain_timeout_s);
    drainer = std::thread([&] {
      if (member) member->leave();  // routers stop sending here at their next look
      const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(drain_timeout_s * 1000));
      const size_t num_cancelled = server.drain(timeout);
      report_drained(engine, num_cancelled);
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
}

}  // namespace

int cmd_serve(int argc, char** argv) {
  if (serves_several_models(argc, argv)) return cmd_serve_models(argc, argv);
  CLI::App app{"Serve the OpenAI-compatible API (completions, chat completions, SSE, metrics)", "kvlm serve"};
  app.footer("Several models in one server, loaded on demand, or one that sleeps when idle: --models-dir DIR, "
             "-m NAME=PATH (repeatable), --models-mem, --models-max, --sleep-idle-seconds, --model-load-timeout "
             "(kvlm serve --models-dir . --help; docs/serve-models.md)");
  ServeFlags f;
  add_serve_options(app, f);
  KVLM_PARSE(app, argc, argv);
  finish_server_config(f);
  const sigset_t stop_signals = block_stop_signals();

  auto engine = start_engine(f.engine);
  default_model_name(f.server, *engine, f.engine.model_path);
  f.server.loras = load_served_loras(f.loras, engine->model());
  if (f.allow_runtime_lora) {
    const Model& model = engine->model();
    f.server.load_lora = [&model, type = f.loras.type](const std::string& path) {
      return load_lora_spec({"", path, 1.0f}, model, type);
    };
  }
  if (!f.server.slot_save_path.empty())
    f.server.slot_namespace = slot_namespace(*engine, f.engine);
  Server server(*engine, f.server);
  server.bind();
  ReloadOnSighup reload([&server] { server.reload_api_keys(); });
  std::unique_ptr<router::RegistryMember> member;
  if (!f.registry.url.empty()) {
    f.registry.ttl = std::chrono::milliseconds(f.register_ttl_ms);
    member = std::make_unique<router::RegistryMember>(
        f.registry, advertised_address(f.advertise, f.server.host, server.port()).url);
  }
  std::unique_ptr<ZmqEventPublisher> zmq_events;
  if (f.zmq.on()) {
    const router::WorkerAddress a = advertised_address(f.advertise, f.server.host, server.port(), "--kv-events-zmq");
    zmq_events = start_zmq_events(f.zmq, *engine, fmt::format("{}:{}", a.host, a.port), f.server.model_names[0]);
  }
  print_listening(f.server, server, *engine);
  serve_until_stopped(server, *engine, member.get(), stop_signals, f.drain_timeout_s);
  return 0;
}

}  // namespace kvlm::apps
