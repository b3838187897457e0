#include "server/server.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "chat/chat_prompt.h"
#include "common/error.h"
#include "common/log.h"
#include "engine/engine.h"
#include "model/model.h"
#include "server/http/connection_limit.h"
#include "server/metrics_text.h"
#include "server/openai/json_text.h"
#include "server/routes.h"
#include "server/web_assets.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace kvlm {

struct Server::Impl {
  Impl(Engine& engine, ServerConfig c)
      : config(std::move(c)),
        ctx{engine, config.model_name, nullptr, "", ToolCallFormat::kGeneric, false, {}, SIZE_MAX,
            config.sse_heartbeat, config.max_queued_requests, config.request_timeout_s, config.retry_after_s, {},
            {0}, {0}} {}
  ServerConfig config;
  ServerContext ctx;
  httplib::Server http;
  int port = -1;
  // The methods each route answers: a known path asked with another method
  // is a 405 with this list in its Allow header, not a 404.
  std::map<std::string, std::set<std::string>> allowed_methods;
};

namespace {

using Route = void (*)(ServerContext&, const httplib::Request&, httplib::Response&);

bool authorized(const ServerConfig& config, const httplib::Request& req) {
  if (config.api_key.empty()) return true;
  return req.get_header_value("Authorization") == "Bearer " + config.api_key;
}

// See ServerContext::max_prompt_bytes: a token never stands for more input
// bytes than its piece has (SPM's U+2581 and GPT-2's byte mapping only grow
// what they replace), so more than max_model_len longest pieces of bytes
// always tokenize past the context.
size_t max_prompt_bytes(const Engine& engine) {
  const Tokenizer& tok = engine.tokenizer();
  size_t longest = 1;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) longest = std::max(longest, tok.piece(id).size());
  return static_cast<size_t>(engine.max_model_len()) * longest;
}

// Routing misses and refusals by the transport (a malformed request line or
// header, a body over the limit) as OpenAI-style JSON.
void answer_transport_error(const std::map<std::string, std::set<std::string>>& allowed_methods,
                            const httplib::Request& req, httplib::Response& res) {
  if (res.status == 404) {
    if (const auto it = allowed_methods.find(req.path); it != allowed_methods.end()) {
      std::string allow;
      for (const std::string& m : it->second) allow += (allow.empty() ? "" : ", ") + m;
      if (it->second.count("GET")) allow += ", HEAD";  // httplib answers HEAD with the GET handler
      res.status = 405;
      res.set_header("Allow", allow);
    }
  }
  std::string message = res.status == 404   ? fmt::format("no route {} {}", req.method, req.path)
                        : res.status == 405 ? fmt::format("{} is not allowed on {}; use {}", req.method, req.path,
                                                          res.get_header_value("Allow"))
                        : res.status == 413 ? "the request body is too large"
                                            : fmt::format("HTTP {}", res.status);
  const std::string body = openai::dump_json(openai::error_json({res.status, unicode::sanitize_utf8(message), std::nullopt}));
  if (res.status == 404 || res.status == 405) return res.set_content(body, "application/json");
  // After a request httplib could not parse, the rest of the connection is
  // garbage (and its Connection: close went unread): answer, then close.
  // A provider that reports failure after its last byte makes httplib drop
  // the socket instead of waiting 30 s for another request on it.
  res.set_header("Connection", "close");
  res.set_content_provider(body.size(), "application/json",
                           [body](size_t offset, size_t length, httplib::DataSink& sink) {
                             sink.write(body.data() + offset, length);
                             return false;
                           });
}

// The transport's workers behind --max-connections: connections past it are
// answered 503 (Retry-After) by the pre-routing handler and closed.
void install_connection_limit(httplib::Server& http, const ServerConfig& config, int max_seqs,
                              std::atomic<int64_t>& num_rejected) {
  size_t threads = config.num_http_threads > 0 ? static_cast<size_t>(config.num_http_threads)
                                               : static_cast<size_t>(std::max(32, 2 * max_seqs + 8));
  // More workers than connections allowed would never run.
  if (config.max_connections > 0) threads = std::min(threads, config.max_connections);
  const size_t max_connections = config.max_connections;
  http.new_task_queue = [threads, max_connections, &num_rejected] {
    return new LimitedTaskQueue(threads, max_connections, num_rejected);
  };
  http.set_pre_routing_handler([max_connections, retry_after_s = config.retry_after_s](const httplib::Request&,
                                                                                       httplib::Response& res) {
    if (!LimitedTaskQueue::over_limit()) return httplib::Server::HandlerResponse::Unhandled;
    res.set_header("Connection", "close");
    send_overloaded(res, retry_after_s,
                    fmt::format("the server has {} connections open, its limit (--max-connections); retry later",
                                max_connections),
                    "too_many_connections");
    return httplib::Server::HandlerResponse::Handled;
  });
}

}  // namespace

Server::Server(Engine& engine, ServerConfig config) : impl_(std::make_unique<Impl>(engine, std::move(config))) {
  Impl& s = *impl_;
  // The chat template: an override must parse (a startup error); a model
  // without one still serves completions, and chat requests get a 400.
  try {
    s.ctx.chat_template = load_chat_template(engine.model().gguf().metadata(), s.config.chat_template_file);
    s.ctx.tool_format = detect_tool_call_format(s.ctx.chat_template->source());
    s.ctx.template_renders_tools = template_renders_tools(s.ctx.chat_template->source());
    log_info("chat template: tool calls in the {} format{}", tool_call_format_name(s.ctx.tool_format),
             s.ctx.template_renders_tools ? "" : " (tools described in a system prompt)");
  } catch (const Error& e) {
    if (s.config.chat_template_file) throw;
    s.ctx.chat_template_error = e.what();
    log_warn("chat completions disabled: {}", e.what());
  }

  install_connection_limit(s.http, s.config, engine.config().max_seqs, s.ctx.num_rejected_connections);
  s.http.set_payload_max_length(s.config.max_body_bytes);
  s.http.set_read_timeout(60);
  s.http.set_write_timeout(60);
  s.http.set_keep_alive_timeout(30);
  // httplib's default also sets SO_REUSEPORT, which would let a second server
  // silently share our port; address reuse alone lets us restart promptly.
  s.http.set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });

  s.ctx.max_prompt_bytes = max_prompt_bytes(engine);
  auto route = [this](Route handler, bool needs_key) {
    return [this, handler, needs_key](const httplib::Request& req, httplib::Response& res) {
      if (needs_key && !authorized(impl_->config, req)) {
        openai::RequestError e{401, "Incorrect API key provided: send 'Authorization: Bearer <key>'.", std::nullopt};
        e.code = "invalid_api_key";
        return send_error(res, e);
      }
      // Every handler's failures end here as an OpenAI error: a kvlm::Error
      // keeps its status; anything else is our fault, a logged 500.
      try {
        handler(impl_->ctx, req, res);
      } catch (const Error& e) {
        const openai::RequestError r = error_for(e);
        if (r.status == 500) return send_internal_error(res, req, e.what());  // 503 (shutting down) stays
        send_error(res, r);
      } catch (const std::exception& e) {
        send_internal_error(res, req, e.what());
      } catch (...) {
        send_internal_error(res, req, "unknown exception");
      }
    };
  };
  // POST routes read their body through a content reader: httplib's own
  // reading treats application/x-www-form-urlencoded (curl -d's default) as a
  // form and refuses one over 8 KiB with 413; every body here is JSON,
  // whatever its Content-Type says.
  auto post = [&s](const std::string& path, auto handler) {
    s.allowed_methods[path].insert("POST");
    s.http.Post(path, [handler](const httplib::Request& req, httplib::Response& res,
                                const httplib::ContentReader& read) {
      std::string body;
      const bool ok = read([&body](const char* data, size_t n) {
        body.append(data, n);
        return true;
      });
      if (!ok) return;  // too large or cut off: res.status says which, the error handler answers
      httplib::Request with_body = req;
      with_body.body = std::move(body);
      handler(with_body, res);
    });
  };
  auto get = [&s](const std::string& path, auto handler) {
    s.allowed_methods[path].insert("GET");
    s.http.Get(path, handler);
  };
  post("/v1/completions", route(handle_completions, true));
  post("/v1/chat/completions", route(handle_chat_completions, true));
  get("/v1/models", route(handle_models, true));
  post("/tokenize", route(handle_tokenize, true));
  post("/detokenize", route(handle_detokenize, true));
  get("/health", route(handle_health, false));
  get("/metrics", route(handle_metrics, false));
  get("/v1/status", route(handle_status, true));
  add_web_routes(s.http);
  for (const WebAsset& asset : web_assets()) s.allowed_methods[std::string(asset.path)].insert("GET");
  s.allowed_methods["/"].insert("GET");

  s.http.set_error_handler([&s](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    try {
      answer_transport_error(s.allowed_methods, req, res);
    } catch (...) {
      res.set_content(R"({"error":{"message":"internal error","type":"server_error","param":null,"code":null}})",
                      "application/json");
    }
  });
  s.http.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    // Handlers catch their own failures; this is the transport's last resort.
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      send_internal_error(res, req, e.what());
    } catch (...) {
      send_internal_error(res, req, "unknown exception");
    }
  });
}

Server::~Server() { stop(); }

void Server::bind() {
  Impl& s = *impl_;
  if (s.config.port == 0) {
    s.port = s.http.bind_to_any_port(s.config.host);
  } else {
    s.port = s.http.bind_to_port(s.config.host, s.config.port) ? s.config.port : -1;
  }
  if (s.port < 0)
    throw_error(ErrorCode::kUnavailable, "cannot listen on {}:{} (in use, or not an address of this machine)",
                s.config.host, s.config.port);
  raise_listen_backlog(s.port);
}

int Server::port() const { return impl_->port; }

void Server::run() {
  if (impl_->port < 0) bind();
  impl_->http.listen_after_bind();
}

size_t Server::drain(std::chrono::milliseconds timeout) { return impl_->ctx.in_flight.drain(impl_->ctx.engine, timeout); }

void Server::stop() {
  if (impl_->http.is_running()) impl_->http.stop();
}

}  // namespace kvlm
