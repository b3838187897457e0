// What the router's request handlers share: its configuration, the workers,
// the metrics, the prompt reader; and Dispatch, one request's claim on the
// worker a policy chose. Internal to router/.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "wire/http/message.h"
#include <nlohmann/json.hpp>

#include "common/memory_budget.h"
#include "router/metrics.h"
#include "router/policy.h"
#include "router/prompt_reader.h"
#include "router/response_owners.h"
#include "router/router.h"
#include "router/upstream.h"
#include "router/workers.h"
#include "wire/http/api_keys.h"

namespace kvlm::router {

using Json = nlohmann::ordered_json;

struct RouterContext {
  RouterContext(RouterConfig c, std::unique_ptr<PromptReader> p)
      : config(std::move(c)), workers(config.health), prompts(std::move(p)), body_memory(config.body_mem_bytes) {}
  const RouterConfig config;
  WorkerSet workers;
  RouterMetrics metrics;
  std::unique_ptr<PromptReader> prompts;  // null: prompts are unknown
  uint64_t round_robin = 0;               // under workers.mu()
  const ApiKeyring* keys = nullptr;       // the clients' keys (their metrics)
  const http::ServerStats* http_stats = nullptr;  // the transport's counters (/metrics)
  ResponseOwners response_owners;         // stored Responses by the worker that answered them
  MemoryBudget body_memory;               // --body-mem
  std::atomic<int64_t> num_rejected_body_memory{0};
};

// One request's claim on a worker: counted in its in-flight requests and
// (until the first token) its outstanding prompt tokens, which the policies
// weigh; released when destroyed.
class Dispatch {
 public:
  Dispatch(RouterContext& ctx, Decision d);
  ~Dispatch();
  Dispatch(const Dispatch&) = delete;
  Dispatch& operator=(const Dispatch&) = delete;

  Worker& worker() const { return *decision_.worker; }
  const Decision& decision() const { return decision_; }
  // The worker has started answering (its prefill is done): its
  // outstanding tokens no longer count against it.
  void started();

 private:
  RouterContext& ctx_;
  Decision decision_;
  bool started_ = false;
};

// Chooses a worker (not in `exclude`) with the configured policy and claims
// it; nullopt when none can take the request.
std::unique_ptr<Dispatch> dispatch(RouterContext& ctx, PromptInfo& prompt, const std::set<std::string>& exclude);

// Adds to `skip` the workers that say which models they serve and do not
// serve `model` (as a base model or a LoRA adapter), when some worker does
// (under workers.mu()); a model no worker claims leaves the choice open
// (the worker answers 404 itself).
void skip_other_models(const std::string& model, const std::vector<std::shared_ptr<Worker>>& workers,
                       std::set<std::string>& skip);

// The model a request is about: its JSON body's `model`, or the id of GET
// /v1/models/{id}; empty when it names none.
std::string request_model(const http::Request& req);

// The prompt a request carries, as the policy needs it: its tokens (with a
// prompt reader; kv-aware, and the cached-token prediction), its cache salt
// and session key.
PromptInfo prompt_info(const RouterContext& ctx, bool chat, const Json& body, const http::Request& req);

// A request to a worker: the worker key, JSON body.
UpstreamRequest upstream_request(const RouterContext& ctx, const std::string& method, const std::string& target,
                                 std::string body);
UpstreamTimeouts upstream_timeouts(const RouterContext& ctx);

// A worker's usage report beside the prediction its dispatch made (metrics).
void observe_usage(RouterContext& ctx, const Dispatch& d, const Json& usage);

// The 503 when no worker can take a request (`why`: the last failure).
void refuse_no_worker(RouterContext& ctx, http::Response& res, const std::string& why);
// Copies a worker's answer (status, body, the headers a client uses).
void pass_through(const UpstreamExchange& x, std::string body, http::Response& res);
// Reads a whole answer, watching the client (req.client_gone()): nullopt
// when it hung up (the caller drops the exchange, which cancels the
// worker's request).
std::optional<std::string> read_whole(RouterContext& ctx, UpstreamExchange& x, const http::Request& req);

// Whether a worker's answer means "try another worker" rather than "this is
// the answer": 503 (draining, its queue full; 529 on Anthropic's routes)
// before anything was sent.
bool worth_another_worker(int status);

// Route handlers (forward.cpp, relay.cpp, status.cpp).
void handle_generation(RouterContext& ctx, bool chat, const http::Request& req, http::Response& res);
void handle_proxied(RouterContext& ctx, const http::Request& req, http::Response& res);
void handle_status(RouterContext& ctx, const http::Request& req, http::Response& res);
void handle_health(RouterContext& ctx, const http::Request& req, http::Response& res);
void handle_metrics(RouterContext& ctx, const http::Request& req, http::Response& res);

// relay.cpp: answers a streaming request from its first worker's open
// exchange (status 200, an event stream), resuming on other workers if it fails.
struct StreamStart {
  Json body;                      // the request as the client sent it
  bool chat = false;
  std::string path;
  PromptInfo prompt;
  std::unique_ptr<Dispatch> dispatch;
  std::unique_ptr<UpstreamExchange> exchange;
  std::set<std::string> tried;
  uint64_t seed = 0;              // the request's seed (the client's, or one the router chose)
  std::shared_ptr<KeyTicket> key; // the client's key: charged the stream's tokens at its end
};
void relay_stream(RouterContext& ctx, StreamStart start, http::Response& res);

}  // namespace kvlm::router
