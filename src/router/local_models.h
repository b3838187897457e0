// A model host whose models run as `kvlm serve` worker processes of this
// machine, started on a request's first need of them and stopped when idle
// or for room (docs/serve-models.md). Each model
// has its own process, so its own engine, KV pool and metrics, and
// unloading it gives all of its memory back to the machine. The router in
// front (router.h, RouterConfig::model_host) sees each process as a worker
// that serves exactly its model.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "router/model_host.h"

namespace kvlm::router {

class Router;

struct LocalModelSpec {
  std::string name;
  std::string path;  // a GGUF file or a Hugging Face folder
};

struct LocalModelsConfig {
  std::vector<LocalModelSpec> models;     // the first is the default
  std::string program;                    // the kvlm binary the workers run
  std::vector<std::string> worker_args;   // every worker's other kvlm serve flags
  std::string worker_api_key;             // the workers' key (given in their environment)
  int64_t max_memory_bytes = 0;           // --models-mem: the loaded workers' memory at most (0: no cap)
  int32_t max_loaded = 0;                 // --models-max: loaded at once at most (0: no cap)
  double sleep_idle_seconds = 0;          // a model idle this long sleeps (0: never)
  std::chrono::seconds load_timeout{600}; // a worker not ready by then failed
};

// The models of a directory: each *.gguf file (the first part of a split
// one) by its name without .gguf, each folder with a config.json by its
// name; sorted by name. Throws Error(kNotFound) for a directory without any.
std::vector<LocalModelSpec> models_in_directory(const std::string& dir);

class LocalModels final : public ModelHost {
 public:
  // Throws Error(kInvalidArgument) for no models or a name given twice.
  explicit LocalModels(LocalModelsConfig config);
  ~LocalModels() override;  // shutdown()
  LocalModels(const LocalModels&) = delete;
  LocalModels& operator=(const LocalModels&) = delete;

  // The router whose workers the models become; before any request.
  void attach(Router& router);
  // Stops every worker (SIGTERM, then SIGKILL after a grace period) and the
  // idle watcher; the router is not touched after it returns.
  void shutdown();

  std::string default_model() const override;
  bool hosts(const std::string& name) const override;
  Lease acquire(const std::string& name) override;
  std::vector<HostedModel> models() const override;
  void load(const std::string& name) override;
  std::string unload(const std::string& name) override;
  std::string sleep(const std::optional<std::string>& name) override;
  void wake_up(const std::optional<std::string>& name) override;
  bool sleeping() const override;

 private:
  struct Entry;
  using Lock = std::unique_lock<std::mutex>;

  Entry& find(const std::string& name) const;  // throws kNotFound
  void ensure_loaded(Entry& e, Lock& lock);
  void make_room(const Entry& e, Lock& lock);
  void start(Entry& e);
  void stop(Entry& e, Lock& lock);
  bool busy(const Entry& e) const;
  void read_worker(Entry& e, int fd, uint64_t generation);
  void worker_exited(Entry& e, uint64_t generation, const std::string& last_lines);
  void watch_idle();
  void measure(Entry& e) const;

  const LocalModelsConfig config_;
  std::vector<std::unique_ptr<Entry>> entries_;
  Router* router_ = nullptr;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread idle_watcher_;
};

}  // namespace kvlm::router
