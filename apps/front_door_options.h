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
};

void add_front_door_options(CLI::App& app, FrontDoorFlags& f);
// After parsing: $KVLM_API_KEY when no --api-key and no --api-key-file was given.
void apply_key_environment(FrontDoorFlags& f);

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
