#include "apps/front_door_options.h"

#include <csignal>
#include <cstdlib>

#include <fmt/format.h>

#include "common/error.h"
#include "common/log.h"
#include "wire/http/api_keys.h"

namespace kvlm::apps {

void add_front_door_options(CLI::App& app, FrontDoorFlags& f) {
  app.add_option("--api-key", f.api_keys,
                 "require this key ('Authorization: Bearer KEY' or 'x-api-key: KEY'); repeatable; never empty "
                 "(default: $KVLM_API_KEY; set but empty, it counts as not set)")
      ->allow_extra_args(false);
  // Recorded when given empty: the string alone cannot tell that from not given.
  auto note_empty = [&f](const char* flag) {
    return [&f, flag](const std::string& value) {
      if (value.empty()) f.empty_flags.push_back(flag);
    };
  };
  app.add_option("--api-key-file", f.api_key_file,
                 "keys one a line: KEY [name=N] [rpm=N] [tpm=N] [concurrent=N]; at least one key; reloaded on "
                 "SIGHUP (a reload that finds no key keeps the keys in use)")
      ->each(note_empty("--api-key-file"));
  app.add_option("--metrics-key", f.metrics_key, "/metrics needs this key, and /v1/status takes it beside the API keys")
      ->each(note_empty("--metrics-key"));
  app.add_option("--ssl-cert-file", f.ssl_cert_file, "serve HTTPS with this PEM certificate (and --ssl-key-file)");
  app.add_option("--ssl-key-file", f.ssl_key_file, "the PEM private key of --ssl-cert-file");
}

void apply_key_environment(FrontDoorFlags& f) {
  if (!f.api_keys.empty() || !f.api_key_file.empty()) return;
  if (const char* key = std::getenv("KVLM_API_KEY"); key && *key) f.api_keys.push_back(key);
}

void check_front_door_flags(const FrontDoorFlags& f) {
  if (!f.empty_flags.empty())
    throw_error(ErrorCode::kInvalidArgument, "{} \"\": an empty value would turn its check off; give one, or leave "
                "the flag out", f.empty_flags.front());
  // Loaded once here so that a bad key or key file stops the start before a
  // model loads; the server loads them again for itself.
  (void)load_api_keys(f.api_keys, f.api_key_file);
}

void block_reload_signal() {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &s, nullptr);
}

ReloadOnSighup::ReloadOnSighup(std::function<void()> reload) {
  thread_ = std::thread([this, reload = std::move(reload)] {
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGHUP);
    for (;;) {
      int sig = 0;
      sigwait(&s, &sig);
      if (stopping_) return;
      try {
        reload();
        log_info("SIGHUP: API keys reloaded");
      } catch (const Error& e) {
        log_error("SIGHUP: API keys not reloaded (the keys in use stay): {}", e.what());
      }
    }
  });
}

ReloadOnSighup::~ReloadOnSighup() {
  stopping_ = true;
  pthread_kill(thread_.native_handle(), SIGHUP);
  thread_.join();
}

}  // namespace kvlm::apps
