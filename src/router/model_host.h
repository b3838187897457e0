// Models that a router starts on demand instead of finding them running:
// `kvlm serve --models-dir DIR` (or several -m NAME=PATH, or
// --sleep-idle-seconds) is a router over one worker process per model that
// a request has asked for (router/local_models.h; docs/serve-models.md).
// The router asks its host for a lease on the model
// a request names before it routes it; the host starts the model's worker
// when none runs and keeps it while a lease or a request holds it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kvlm::router {

// One model the host can serve, as GET /v1/models and /metrics show it.
struct HostedModel {
  std::string name;
  std::string path;
  std::string state;          // "unloaded", "loading", "loaded", "sleeping", "failed"
  std::string error;          // why it last failed to load
  std::string url;            // its worker while loaded
  int64_t memory_bytes = 0;   // its worker's resident memory when last measured (0: never loaded)
  int64_t num_loads = 0;
  double last_load_seconds = 0;  // from start to ready, its last load
  int64_t created = 0;        // unix seconds: the file's modification time
};

class ModelHost {
 public:
  virtual ~ModelHost() = default;

  // Keeps the model loaded while held.
  using Lease = std::shared_ptr<void>;

  // The model a request that names none gets (the first one listed).
  virtual std::string default_model() const = 0;
  // Whether `name` is one of its models (not a LoRA adapter or an alias
  // the workers may know).
  virtual bool hosts(const std::string& name) const = 0;
  // Starts the model if it is not loaded (waiting for it, unloading idle
  // ones for room) and leases it. Throws Error: kNotFound for a name it
  // does not host, kUnavailable when it cannot load it now (no room, the
  // worker failed to start).
  virtual Lease acquire(const std::string& name) = 0;

  virtual std::vector<HostedModel> models() const = 0;
  // POST /models/load: throws as acquire does.
  virtual void load(const std::string& name) = 0;
  // POST /models/unload; POST /sleep: every model (or the one named) gives
  // its memory back, and wakes on its next request or /wake_up. Both throw
  // kNotFound for an unknown name, and leave a model that has requests
  // loaded: they return the first such model's name (empty: done).
  virtual std::string unload(const std::string& name) = 0;
  virtual std::string sleep(const std::optional<std::string>& name) = 0;
  virtual void wake_up(const std::optional<std::string>& name) = 0;
  virtual bool sleeping() const = 0;  // some model sleeps and none is loaded
};

}  // namespace kvlm::router
