// kvlm serve with several models (--models-dir DIR, -m NAME=PATH repeated)
// or with sleep (--sleep-idle-seconds): a router in front of one kvlm serve
// worker process per model, started on a request's first need of it
// (src/router/local_models.h; docs/serve-models.md).
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "apps/cli_parse.h"
#include "apps/commands.h"
#include "apps/front_door_options.h"
#include "apps/http_options.h"
#include "apps/stop_signals.h"
#include "common/error.h"
#include "common/log.h"
#include "router/local_models.h"
#include "router/prompt_reader.h"
#include "router/router.h"

namespace kvlm::apps {
namespace {

using router::LocalModelsConfig;
using router::LocalModelSpec;
using router::RouterConfig;

// The flags this front reads; every other flag is a worker's.
struct ModelsFlags {
  std::string models_dir;
  std::vector<std::string> models;  // -m [NAME=]PATH
  std::string served_model_name;    // the one model's name (-m PATH)
  int64_t load_timeout_s = 600;
  FrontDoorFlags door;
  HttpFlags http;
  bool verbose = false;
};

const char* kFrontFlags[] = {"--models-dir", "--models-mem", "--models-max", "--sleep-idle-seconds"};

void add_flags(CLI::App& app, RouterConfig& c, LocalModelsConfig& m, ModelsFlags& f) {
  app.add_option("--host", c.host, "address to listen on")->capture_default_str();
  app.add_option("--port", c.port, "port (0: any free port)")->capture_default_str();
  app.add_option("--models-dir", f.models_dir,
                 "serve every model of this folder (*.gguf files, Hugging Face folders), each by its name");
  app.add_option("-m,--model", f.models, "a model to serve: [NAME=]PATH; repeatable")->allow_extra_args(false);
  app.add_option("--served-model-name", f.served_model_name, "the name of the one model given by -m PATH");
  app.add_option("--models-mem", m.max_memory_bytes,
                 "memory the loaded models' workers may hold together; the least recently used idle one is unloaded "
                 "for room (K/M/G suffixes; default: no cap)")
      ->transform(CLI::AsSizeValue(false));
  app.add_option("--models-max", m.max_loaded, "models loaded at once at most (0: no cap)")->capture_default_str();
  app.add_option("--sleep-idle-seconds", m.sleep_idle_seconds,
                 "a model idle this long gives its memory back (sleeps) until its next request (0: never)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--model-load-timeout", f.load_timeout_s, "seconds a model may take to load")->capture_default_str();
  add_front_door_options(app, f.door);
  app.add_option("--cors-origin", c.cors_origins, "as kvlm serve's; repeatable")->allow_extra_args(false);
  app.add_option("--request-timeout", c.request_timeout_s, "seconds a request answered whole may take")
      ->capture_default_str();
  app.add_option("--retry-after", c.retry_after_s, "seconds in the Retry-After of the 503s")->capture_default_str();
  add_http_options(app, c.http, f.http, "each holds one request answered whole while its model answers");
  app.add_flag("-v,--verbose", f.verbose, "log the models' loads and unloads");
}

// -m [NAME=]PATH: a NAME= prefix when the text before '=' is no path.
LocalModelSpec model_spec(const std::string& arg, const std::string& served_name) {
  const size_t eq = arg.find('=');
  if (eq != std::string::npos && eq > 0 && arg.substr(0, eq).find('/') == std::string::npos &&
      !std::filesystem::exists(arg))
    return {arg.substr(0, eq), arg.substr(eq + 1)};
  const std::string name = served_name.empty() ? std::filesystem::path(arg).stem().string() : served_name;
  return {name, arg};
}

std::vector<LocalModelSpec> model_specs(const ModelsFlags& f) {
  std::vector<LocalModelSpec> out;
  if (!f.models_dir.empty()) out = router::models_in_directory(f.models_dir);
  for (const std::string& arg : f.models) out.push_back(model_spec(arg, f.models.size() == 1 ? f.served_model_name : ""));
  if (out.empty()) throw_error(ErrorCode::kInvalidArgument, "no models: give --models-dir DIR or -m [NAME=]PATH");
  for (const LocalModelSpec& s : out)
    if (!std::filesystem::exists(s.path)) throw_error(ErrorCode::kNotFound, "model '{}': no file {}", s.name, s.path);
  return out;
}

std::string self_program() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw_error(ErrorCode::kInternal, "cannot find the kvlm binary (/proc/self/exe)");
  return std::string(buf, static_cast<size_t>(n));
}

// The workers' key: fresh for each start, known only to this process and
// its workers (who else on the machine reaches their loopback ports).
std::string random_key() {
  std::random_device rd;
  return fmt::format("kvlm-worker-{:016x}{:016x}", (uint64_t{rd()} << 32) | rd(), (uint64_t{rd()} << 32) | rd());
}

}  // namespace

bool serves_several_models(int argc, char** argv) {
  int num_models = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    for (const char* flag : kFrontFlags)
      if (a == flag || (a.starts_with(flag) && a.size() > std::strlen(flag) && a[std::strlen(flag)] == '=')) return true;
    if (a == "-m" || a == "--model") {
      ++num_models;
      if (i + 1 < argc && model_spec(argv[i + 1], "").path != argv[i + 1]) return true;  // NAME=PATH
    }
  }
  return num_models > 1;
}

int cmd_serve_models(int argc, char** argv) {
  CLI::App app{"Serve several models (or one that sleeps when idle), each in a kvlm serve worker of its own started "
               "on demand; flags not listed here are the workers' (kvlm serve --help)",
               "kvlm serve"};
  app.allow_extras();
  RouterConfig c;
  LocalModelsConfig m;
  ModelsFlags f;
  add_flags(app, c, m, f);
  KVLM_PARSE(app, argc, argv);
  apply_http_flags(f.http, c.http);
  if (f.verbose) set_log_level(LogLevel::kInfo);
  apply_key_environment(f.door);
  apply_front_door_flags(f.door, c);
  m.models = model_specs(f);
  m.program = self_program();
  m.worker_args = app.remaining();
  m.worker_api_key = random_key();
  m.load_timeout = std::chrono::seconds(f.load_timeout_s);
  c.worker_api_key = m.worker_api_key;
  c.policy = router::Policy::kLeastLoad;

  const sigset_t stop_signals = block_stop_signals();

  router::LocalModels host(m);
  c.model_host = &host;
  router::Router r(c, nullptr);
  host.attach(r);
  r.bind();
  ReloadOnSighup reload([&r] { r.reload_api_keys(); });
  std::string names;
  for (const LocalModelSpec& s : m.models) names += (names.empty() ? "" : ", ") + s.name;
  fmt::print(stderr, "kvlm serve: listening on {}://{}:{} (models {}; loaded on demand)\n",
             c.ssl_cert_file.empty() ? "http" : "https", c.host, r.port(), names);
  std::fflush(stderr);
  run_until_stop_signal(stop_signals, [&r] { r.run(); }, [&r] { r.stop(); });
  host.shutdown();
  return 0;
}

}  // namespace kvlm::apps
