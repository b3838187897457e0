// Fleet membership in Redis (or Redis Cluster): workers register themselves
// and routers watch, so workers join and leave without a router restart.
// Redis is the only shared state; there is no consensus of our own.
//
// Keys, all under one hash tag so a cluster keeps them on one node:
//   {kvlm-registry:NAME}:workers        a set of worker URLs
//   {kvlm-registry:NAME}:worker:URL     present while the worker lives: set
//                                       with a TTL, refreshed every TTL / 3
// A worker that stops cleanly deletes its key (and leaves the set); one that
// dies lets its key expire. A router lists the set, keeps the URLs whose key
// exists, and removes the others from the set. While Redis cannot be
// reached, a router keeps the members it last saw.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kvlm {
class RedisRouter;
}

namespace kvlm::router {

struct RegistryConfig {
  std::string url;                           // redis://HOST:PORT[/DB] or redis+cluster://HOST:PORT,...
  std::string name = "kvlm";                 // fleets sharing one Redis keep apart by name
  std::string password_file;                 // first line: the password; "" for none
  std::chrono::milliseconds ttl{3000};       // a worker's key lives this long without a heartbeat
  std::chrono::milliseconds poll{500};       // how often a router lists the members
};

// The key names of a registry.
std::string registry_set_key(const std::string& name);
std::string registry_worker_key(const std::string& name, const std::string& url);

// A worker's registration: heartbeats on a thread of its own.
class RegistryMember {
 public:
  // Throws Error(kInvalidArgument) for a bad URL or an unreadable password file.
  RegistryMember(RegistryConfig config, std::string advertise_url);
  ~RegistryMember();  // leaves (best effort) and stops
  // Deletes its key now (a draining worker); heartbeats stop.
  void leave();

 private:
  void loop();
  bool beat();

  RegistryConfig config_;
  std::string url_;
  std::unique_ptr<RedisRouter> redis_;  // the heartbeat thread's (leave() waits for it)
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool warned_ = false;
  std::thread thread_;
};

// A router's view: calls `on_members` with the live worker URLs after each
// successful listing (on a thread of its own).
class RegistryWatcher {
 public:
  using OnMembers = std::function<void(const std::vector<std::string>& urls)>;
  RegistryWatcher(RegistryConfig config, OnMembers on_members);
  ~RegistryWatcher();

 private:
  void loop();
  // The live members, or false when Redis could not be asked.
  bool list(std::vector<std::string>& urls);

  RegistryConfig config_;
  OnMembers on_members_;
  std::unique_ptr<RedisRouter> redis_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool warned_ = false;
  std::thread thread_;
};

}  // namespace kvlm::router
