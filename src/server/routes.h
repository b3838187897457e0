// Route handlers of the server, one function per route, and what they share.
// Internal to server/: server.cpp registers them with the HTTP transport.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>
#include <string>

#include <httplib.h>

#include "chat/tool_calls.h"
#include "server/in_flight.h"
#include "server/openai/protocol.h"

namespace kvlm {

class Engine;
class ChatTemplate;
class Error;

struct ServerContext {
  Engine& engine;
  std::string model_name;
  std::unique_ptr<ChatTemplate> chat_template;  // null: the model has none (chat requests get 400)
  std::string chat_template_error;              // why it is null
  // How the template's model writes tool calls, and whether the template
  // renders `tools` itself (else a system prompt describes them).
  ToolCallFormat tool_format = ToolCallFormat::kGeneric;
  bool template_renders_tools = false;
  InFlightRequests in_flight;                   // generation requests not yet answered in full
  // A prompt text longer than this many bytes cannot fit the context (no
  // token covers more bytes than the longest vocabulary piece), so it is
  // refused before it is tokenized: a 32 MiB prompt costs nothing.
  size_t max_prompt_bytes = SIZE_MAX;
  std::chrono::milliseconds sse_heartbeat{1000};  // ServerConfig::sse_heartbeat
  int max_queued_requests = -1;                   // ServerConfig::max_queued_requests
  double request_timeout_s = 0;                   // ServerConfig::request_timeout_s
  int retry_after_s = 1;                          // ServerConfig::retry_after_s
  // The queue check and the submission happen under it, so concurrent
  // requests cannot all pass a check that only one of them fits.
  std::mutex admission_mu;
  std::atomic<int64_t> num_rejected_connections{0};
  std::atomic<int64_t> num_rejected_queue{0};
};

// Answers 503 with Retry-After when a generation request of `num_choices`
// would wait beyond --max-queued-requests; call under ctx.admission_mu.
bool refuse_when_queue_full(ServerContext& ctx, int32_t num_choices, httplib::Response& res);
// The 503 of a limit: Retry-After, an OpenAI error with `code`.
void send_overloaded(httplib::Response& res, int retry_after_s, const std::string& message, const char* code);

// Writes an OpenAI-style error.
void send_error(httplib::Response& res, const openai::RequestError& e);
// The OpenAI-style error for a kvlm::Error: 400 for the client's faults, 404,
// 503, else 500 ("server_error").
openai::RequestError error_for(const Error& e);
// Answers 500 for a fault of ours (an exception no validation expected): logs
// `what` with a fresh id that the message repeats, so the log line can be found.
void send_internal_error(httplib::Response& res, const httplib::Request& req, std::string_view what);
// Parses the body as JSON or answers 400; nullopt then.
std::optional<openai::Json> parse_body(const httplib::Request& req, httplib::Response& res);

void handle_completions(ServerContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_chat_completions(ServerContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_models(ServerContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_health(ServerContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_metrics(ServerContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_tokenize(ServerContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_detokenize(ServerContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_status(ServerContext& ctx, const httplib::Request& req, httplib::Response& res);  // routes_web.cpp
// GET / and the chat page's files (no key: the page asks for one).
void add_web_routes(httplib::Server& http);

}  // namespace kvlm
