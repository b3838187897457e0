// A fleet on loopback for the router tests: kvlm serve workers (each on a
// port it keeps across restarts) and a kvlm router in front, and what a
// client sees of an answer, without what differs from server to server.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace kvlm::test {

using Json = nlohmann::json;

struct FleetOptions {
  int num_workers = 3;
  std::vector<std::string> worker_args;  // after the defaults (model, -t 1, --kv-events, template)
  std::vector<std::string> router_args;  // after the defaults (model, template, workers)
  bool start_router = true;
};

class Fleet {
 public:
  explicit Fleet(FleetOptions options = {});
  ~Fleet();

  int router_port() const { return router_->port(); }
  ServerProcess& router() { return *router_; }
  int worker_port(size_t i) const { return ports_[i]; }
  std::string worker_url(size_t i) const { return "http://127.0.0.1:" + std::to_string(ports_[i]); }
  std::string worker_list() const;  // for --workers
  size_t num_workers() const { return ports_.size(); }
  ServerProcess& worker(size_t i) { return *workers_[i]; }

  void kill_worker(size_t i);     // SIGKILL, reaped
  void restart_worker(size_t i);  // on the same port
  void start_router(const std::vector<std::string>& extra = {});
  // Until the router sees every worker up with its KV events (or 10 s).
  void wait_ready();

  static std::string model();
  static std::string chat_template();

 private:
  std::vector<std::string> worker_argv(size_t i) const;
  FleetOptions options_;
  std::vector<int> ports_;
  std::vector<std::unique_ptr<ServerProcess>> workers_;
  std::unique_ptr<ServerProcess> router_;
};

struct HttpAnswer {
  int status = 0;  // 0: no answer
  std::string body;
  Json json() const { return Json::parse(body, nullptr, false); }
};
HttpAnswer http_post(int port, const std::string& path, const Json& body, int timeout_s = 60);
HttpAnswer http_get(int port, const std::string& path);
// The data payloads of a streamed POST, parsed ([DONE] left out; a
// payload that is not JSON fails the test).
std::vector<Json> http_stream(int port, const std::string& path, const Json& body, int* status = nullptr);

// What a client takes from an answer, without what differs between servers
// (ids, created, tool call ids, cached tokens): a whole response, or the
// chunks of a stream folded per choice (text, logprob tokens, tool calls,
// finish reason) with its usage.
Json visible_answer(const Json& response);
Json visible_stream(const std::vector<Json>& chunks);

}  // namespace kvlm::test
