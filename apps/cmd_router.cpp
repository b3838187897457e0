// kvlm router: one OpenAI-compatible endpoint over many kvlm serve workers
// (src/router/router.h, docs/router.md).
#include <csignal>
#include <cstdio>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "apps/cli_parse.h"
#include "apps/commands.h"
#include "apps/front_door_options.h"
#include "apps/http_options.h"
#include "apps/stop_signals.h"
#include "chat/chat_prompt.h"
#include "chat/chat_template.h"
#include "common/error.h"
#include "common/log.h"
#include "model/gguf.h"
#include "model/hf_checkpoint.h"
#include "router/prompt_reader.h"
#include "router/router.h"
#include "tokenizer/tokenizer.h"

namespace kvlm::apps {
namespace {

using router::RouterConfig;

struct RouterFlags {
  std::string workers;  // comma-separated
  std::string model_path;
  std::optional<std::string> chat_template_file;
  std::string policy;
  int64_t health_interval_ms = 1000, health_timeout_ms = 2000, stream_idle_timeout_ms = 15000;
  router::RegistryConfig registry;
  int64_t registry_poll_ms = 500;
  FrontDoorFlags door;
  HttpFlags http;
  bool verbose = false;
};

void add_flags(CLI::App& app, RouterConfig& c, RouterFlags& f) {
  app.add_option("--host", c.host, "address to listen on")->capture_default_str();
  app.add_option("--port", c.port, "port (0: any free port)")->capture_default_str();
  app.add_option("--workers", f.workers, "the workers: http://HOST:PORT,http://HOST:PORT,...");
  app.add_option("--registry", f.registry.url,
                 "watch the workers that register in Redis: redis://HOST:PORT[/DB] or redis+cluster://HOST:PORT,...");
  app.add_option("--registry-name", f.registry.name, "the fleet's name in the registry")->capture_default_str();
  app.add_option("--registry-password-file", f.registry.password_file, "the registry's Redis password (first line)");
  app.add_option("--registry-poll-ms", f.registry_poll_ms, "how often the members are listed")->capture_default_str();
  app.add_option("-m,--model", f.model_path,
                 "the workers' model file: its tokenizer and chat template (never its weights) for kv-aware routing");
  app.add_option("--chat-template-file", f.chat_template_file, "the template the workers use instead of the model's");
  app.add_option("--policy", f.policy, "kv-aware | least-load | round-robin | session (default: kv-aware with -m, "
                                       "else least-load)");
  add_front_door_options(app, f.door);
  app.add_option("--worker-api-key", c.worker_api_key, "the key the workers require (default: the first --api-key)");
  app.add_option("--cors-origin", c.cors_origins,
                 "let browser pages of this origin ('*': any) call the API, as kvlm serve's; repeatable (default: none)")
      ->allow_extra_args(false);
  app.add_option("--load-weight", c.weights.load_weight,
                 "kv-aware: cost of a token a worker must compute first, against one of the request's own")
      ->capture_default_str();
  app.add_option("--tier-cost", c.weights.tier_cost,
                 "kv-aware: cost of a prompt token loaded from the shared tier, against computing it")
      ->capture_default_str();
  app.add_option("--max-attempts", c.max_attempts, "workers one request (or one resumed stream) may try")
      ->capture_default_str();
  app.add_option("--health-interval-ms", f.health_interval_ms, "between health checks of a worker")->capture_default_str();
  app.add_option("--health-timeout-ms", f.health_timeout_ms, "a worker that does not answer a check by then is down")
      ->capture_default_str();
  app.add_option("--stream-idle-timeout-ms", f.stream_idle_timeout_ms,
                 "a stream's worker silent this long is taken for dead (workers send keep-alives every second)")
      ->capture_default_str();
  app.add_option("--body-mem", c.body_mem_bytes,
                 "bytes the parsed JSON of the requests being handled may hold together; past it 503, a body that "
                 "alone needs more 413 (K/M/G suffixes)")
      ->capture_default_str()
      ->transform(CLI::AsSizeValue(false))
      ->check(CLI::Range(int64_t{1} << 20, int64_t{1} << 40));
  app.add_option("--request-timeout", c.request_timeout_s, "seconds a request answered whole may take")
      ->capture_default_str();
  app.add_option("--retry-after", c.retry_after_s, "seconds in the Retry-After of the router's 503s")->capture_default_str();
  add_http_options(app, c.http, f.http, "each holds one request answered whole while its worker answers");
  app.add_flag("-v,--verbose", f.verbose, "log routing and worker details");
}

// The tokenizer and chat template of the model file: its metadata only.
std::unique_ptr<router::PromptReader> load_prompts(const RouterFlags& f) {
  if (f.model_path.empty()) return nullptr;
  auto gguf = open_model_file(f.model_path);
  auto tokenizer = Tokenizer::from_metadata(gguf->metadata());
  std::unique_ptr<ChatTemplate> tmpl;
  try {
    tmpl = load_chat_template(gguf->metadata(), f.chat_template_file);
  } catch (const Error& e) {
    if (f.chat_template_file) throw;
    log_warn("router: chat prompts are not predicted: {}", e.what());
  }
  return std::make_unique<router::PromptReader>(std::move(tokenizer), std::move(tmpl));
}

}  // namespace

int cmd_router(int argc, char** argv) {
  CLI::App app{"Route OpenAI-compatible requests over many kvlm serve workers (docs/router.md)", "kvlm router"};
  RouterConfig c;
  RouterFlags f;
  add_flags(app, c, f);
  KVLM_PARSE(app, argc, argv);
  apply_http_flags(f.http, c.http);
  if (f.verbose) set_log_level(LogLevel::kInfo);
  apply_key_environment(f.door);
  apply_front_door_flags(f.door, c);
  if (c.worker_api_key.empty() && !c.api_keys.empty()) c.worker_api_key = c.api_keys[0];
  c.workers = split_list(f.workers);
  if (!f.registry.url.empty()) {
    f.registry.poll = std::chrono::milliseconds(f.registry_poll_ms);
    c.registry = f.registry;
  }
  const std::string policy = !f.policy.empty() ? f.policy : f.model_path.empty() ? "least-load" : "kv-aware";
  const auto p = router::parse_policy(policy);
  if (!p) throw_error(ErrorCode::kInvalidArgument, "--policy '{}': kv-aware, least-load, round-robin or session", policy);
  c.policy = *p;
  c.health.interval = std::chrono::milliseconds(f.health_interval_ms);
  c.health.timeout = std::chrono::milliseconds(f.health_timeout_ms);
  c.stream_idle_timeout = std::chrono::milliseconds(f.stream_idle_timeout_ms);

  const sigset_t stop_signals = block_stop_signals();

  router::Router r(c, load_prompts(f));
  r.bind();
  ReloadOnSighup reload([&r] { r.reload_api_keys(); });
  fmt::print(stderr, "kvlm router: listening on {}://{}:{} ({} workers{}, policy {})\n",
             c.ssl_cert_file.empty() ? "http" : "https", c.host, r.port(),
             c.workers.size(), c.registry ? " and the registry's" : "", router::policy_name(c.policy));
  std::fflush(stderr);
  run_until_stop_signal(stop_signals, [&r] { r.run(); }, [&r] { r.stop(); });
  return 0;
}

}  // namespace kvlm::apps
