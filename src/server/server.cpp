#include "server/server.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/error.h"
#include "common/log.h"
#include "engine/engine.h"
#include "model/model.h"
#include "server/routes.h"
#include "tokenizer/chat_prompt.h"

namespace kvlm {

struct Server::Impl {
  Impl(Engine& engine, ServerConfig c) : config(std::move(c)), ctx{engine, config.model_name, nullptr, "", {}} {}
  ServerConfig config;
  ServerContext ctx;
  httplib::Server http;
  int port = -1;
};

namespace {

using Route = void (*)(ServerContext&, const httplib::Request&, httplib::Response&);

bool authorized(const ServerConfig& config, const httplib::Request& req) {
  if (config.api_key.empty()) return true;
  return req.get_header_value("Authorization") == "Bearer " + config.api_key;
}

}  // namespace

Server::Server(Engine& engine, ServerConfig config) : impl_(std::make_unique<Impl>(engine, std::move(config))) {
  Impl& s = *impl_;
  // The chat template: an override must parse (a startup error); a model
  // without one still serves completions, and chat requests get a 400.
  try {
    s.ctx.chat_template = load_chat_template(engine.model().gguf().metadata(), s.config.chat_template_file);
  } catch (const Error& e) {
    if (s.config.chat_template_file) throw;
    s.ctx.chat_template_error = e.what();
    log_warn("chat completions disabled: {}", e.what());
  }

  const int threads = s.config.num_http_threads > 0
                          ? s.config.num_http_threads
                          : std::max(32, 2 * engine.config().max_seqs + 8);
  s.http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
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

  auto route = [this](Route handler, bool needs_key) {
    return [this, handler, needs_key](const httplib::Request& req, httplib::Response& res) {
      if (needs_key && !authorized(impl_->config, req)) {
        openai::RequestError e{401, "Incorrect API key provided: send 'Authorization: Bearer <key>'.", std::nullopt};
        e.code = "invalid_api_key";
        return send_error(res, e);
      }
      handler(impl_->ctx, req, res);
    };
  };
  s.http.Post("/v1/completions", route(handle_completions, true));
  s.http.Post("/v1/chat/completions", route(handle_chat_completions, true));
  s.http.Get("/v1/models", route(handle_models, true));
  s.http.Post("/tokenize", route(handle_tokenize, true));
  s.http.Post("/detokenize", route(handle_detokenize, true));
  s.http.Get("/health", route(handle_health, false));
  s.http.Get("/metrics", route(handle_metrics, false));
  s.http.Get("/v1/status", route(handle_status, true));
  add_web_routes(s.http);

  s.http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    // Routing misses and transport-level refusals (e.g. 413) as JSON.
    if (!res.body.empty()) return;
    std::string message = res.status == 404 ? fmt::format("no route {} {}", req.method, req.path)
                          : res.status == 413 ? "the request body is too large"
                                              : fmt::format("HTTP {}", res.status);
    openai::RequestError e{res.status, message, std::nullopt};
    res.set_content(openai::error_json(e).dump(), "application/json");
  });
  s.http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    log_error("request failed: {}", what);
    openai::RequestError e{500, "internal error: " + what, std::nullopt, "server_error"};
    send_error(res, e);
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
