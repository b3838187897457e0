// The flags of a server's front door, shared by kvlm serve and kvlm router:
// API keys (repeatable, a key file with names and limits, $KVLM_API_KEY),
// the metrics key, HTTPS; and a thread that reloads the keys on SIGHUP.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

namespace kvlm::apps {

struct FrontDoorFlags {
  std::vector<std::string> api_keys;
  std::string api_key_file;
  std::string metrics_key;
  std::string ssl_cert_file;
  std::string ssl_key_file;
  // --api-key-file and --metrics-key given with an empty value: their
  // defaults are empty too, and mean "no check".
  std::vector<std::string> empty_flags;
};

void add_front_door_options(CLI::App& app, FrontDoorFlags& f);
// After parsing: $KVLM_API_KEY when no --api-key and no --api-key-file was
// given (set but empty counts as not set).
void apply_key_environment(FrontDoorFlags& f);
// After apply_key_environment, before anything slow starts: throws Error
// naming the flag for a key flag given empty and for keys that do not load
// (load_api_keys), so a server never starts with a check off by mistake.
void check_front_door_flags(const FrontDoorFlags& f);
// check_front_door_flags(), then the flags into `config`: kvlm serve's
// ServerConfig and kvlm router's RouterConfig name these fields alike.
template <typename Config>
void apply_front_door_flags(const FrontDoorFlags& f, Config& config) {
  check_front_door_flags(f);
  config.api_keys = f.api_keys;
  config.api_key_file = f.api_key_file;
  config.metrics_key = f.metrics_key;
  config.ssl_cert_file = f.ssl_cert_file;
  config.ssl_key_file = f.ssl_key_file;
}

// Calls `reload` on every SIGHUP (logging what it throws) until destroyed.
// SIGHUP must be blocked in every thread (block_reload_signal() before any
// thread starts).
class ReloadOnSighup {
 public:
  explicit ReloadOnSighup(std::function<void()> reload);
  ~ReloadOnSighup();

 private:
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};
void block_reload_signal();

}  // namespace kvlm::apps
