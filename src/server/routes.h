// Route handlers of the server, one function per route, and what they share.
// Internal to server/: server.cpp registers them with the HTTP transport.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
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
};

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
