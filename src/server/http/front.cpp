#include "server/http/front.h"

#include <cctype>
#include <regex>

#include <fstream>

#include <fmt/format.h>

#include "common/error.h"
#include "common/log.h"
#include "server/http/connection_limit.h"
#include "server/openai/json_text.h"
#include "server/web_assets.h"
#include "tokenizer/unicode.h"

namespace kvlm {

using openai::Json;

void send_error(httplib::Response& res, const openai::RequestError& e) {
  res.status = e.status;
  res.set_content(openai::dump_json(openai::error_json(e)), "application/json");
}

openai::RequestError error_for(const Error& e) {
  int status = 500;
  switch (e.code()) {
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kOutOfRange:
    case ErrorCode::kUnsupported: status = 400; break;
    case ErrorCode::kNotFound: status = 404; break;
    case ErrorCode::kUnavailable: status = 503; break;
    default: break;
  }
  openai::RequestError r{status, e.what(), std::nullopt};
  if (status >= 500) r.type = "server_error";
  return r;
}

void send_internal_error(httplib::Response& res, const httplib::Request& req, std::string_view what) {
  const std::string id = openai::new_id("err");
  log_error("{} {} {}: internal error: {}", id, unicode::sanitize_utf8(req.method), unicode::sanitize_utf8(req.path),
            unicode::sanitize_utf8(what));
  send_error(res, {500, fmt::format("internal error (logged as {})", id), std::nullopt, "server_error"});
}

std::optional<Json> parse_body(const httplib::Request& req, httplib::Response& res) {
  try {
    return openai::parse_json(req.body);
  } catch (const Error& e) {
    send_error(res, {400, fmt::format("the request body is {}", e.what()), std::nullopt});
    return std::nullopt;
  }
}

void send_shutting_down(httplib::Response& res, const std::string& message) {
  openai::RequestError e{503, message, std::nullopt, "server_error"};
  e.code = "server_shutting_down";
  send_error(res, e);
}

void send_model_not_found(httplib::Response& res, const std::string& model) {
  openai::RequestError e{404, fmt::format("The model '{}' does not exist: this server serves the names GET /v1/models lists.",
                                          unicode::sanitize_utf8(model)),
                         std::string("model")};
  e.code = "model_not_found";
  send_error(res, e);
}

void send_overloaded(httplib::Response& res, int retry_after_s, const std::string& message, const char* code) {
  openai::RequestError e{503, message, std::nullopt, "server_error"};
  e.code = code;
  send_error(res, e);
  res.set_header("Retry-After", std::to_string(retry_after_s));
}

void send_unauthorized(httplib::Response& res) {
  openai::RequestError e{401, "Incorrect API key provided: send 'Authorization: Bearer <key>'.", std::nullopt};
  e.code = "invalid_api_key";
  send_error(res, e);
}

RouteHandler with_access(FrontDoor& door, Access access, RouteHandler handler) {
  return [&door, access, handler = std::move(handler)](const httplib::Request& req, httplib::Response& res) {
    std::shared_ptr<KeyTicket> ticket;
    const bool metrics_key = !door.metrics_key.empty() && presents_key(req, door.metrics_key);
    if (access == Access::kMetrics) {
      if (!door.metrics_key.empty() && !metrics_key) return send_unauthorized(res);
    } else if (access == Access::kStatus && metrics_key) {
      // the monitor's key
    } else if (access != Access::kPublic && door.keys.enabled()) {
      std::shared_ptr<KeyState> key = door.keys.find(req);
      if (!key) return send_unauthorized(res);
      if (access == Access::kMetered) {
        auto admitted = door.keys.admit(key, res);
        if (!admitted) return;  // answered 429
        ticket = std::move(*admitted);
      }
    }
    set_current_ticket(ticket.get());
    try {
      handler(req, res);
    } catch (const Error& e) {
      const openai::RequestError r = error_for(e);
      if (r.status == 500) send_internal_error(res, req, e.what());  // 503 (shutting down) stays
      else send_error(res, r);
    } catch (const std::exception& e) {
      send_internal_error(res, req, e.what());
    } catch (...) {
      send_internal_error(res, req, "unknown exception");
    }
    keep_ticket_until_sent(res, std::move(ticket));
  };
}

void RouteTable::post(const std::string& path, Handler handler) {
  allow(path, "POST");
  http_.Post(path, [handler = std::move(handler)](const httplib::Request& req, httplib::Response& res,
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
}

void RouteTable::get(const std::string& path, Handler handler) {
  allow(path, "GET");
  http_.Get(path, std::move(handler));
}

void RouteTable::del(const std::string& path, Handler handler) {
  allow(path, "DELETE");
  http_.Delete(path, std::move(handler));
}

namespace {

// Routing misses and refusals by the transport (a malformed request line or
// header, a body over the limit) as OpenAI-style JSON.
void answer_transport_error(const std::map<std::string, std::set<std::string>>& allowed_methods,
                            const httplib::Request& req, httplib::Response& res) {
  if (res.status == 404) {
    auto it = allowed_methods.find(req.path);
    // Routes with a pattern (GET /v1/models/(.+)) match by it.
    for (auto p = allowed_methods.begin(); it == allowed_methods.end() && p != allowed_methods.end(); ++p)
      if (p->first.find('(') != std::string::npos && std::regex_match(req.path, std::regex(p->first))) it = p;
    if (it != allowed_methods.end()) {
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

}  // namespace

void RouteTable::install_error_handlers() {
  http_.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    try {
      answer_transport_error(allowed_, req, res);
    } catch (...) {
      res.set_content(R"({"error":{"message":"internal error","type":"server_error","param":null,"code":null}})",
                      "application/json");
    }
  });
  http_.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
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

namespace {

// The origin a CORS answer allows for `req`: "*", its own Origin when
// listed, or nothing.
std::optional<std::string> allowed_origin(const std::vector<std::string>& origins, const httplib::Request& req) {
  if (!req.has_header("Origin")) return std::nullopt;
  const std::string origin = req.get_header_value("Origin");
  for (const std::string& o : origins) {
    if (o == "*") return std::string("*");
    if (o == origin) return origin;
  }
  return std::nullopt;
}

// The header names a preflight asks for, kept to the characters header
// names have: the value is echoed back in a header of ours.
std::string requested_headers(const httplib::Request& req) {
  std::string out;
  for (char c : req.get_header_value("Access-Control-Request-Headers"))
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == ',' || c == ' ') out += c;
  return out;
}

}  // namespace

void install_cors(httplib::Server& http, std::vector<std::string> origins) {
  if (origins.empty()) return;
  http.Options(R"(.*)", [origins](const httplib::Request& req, httplib::Response& res) {
    res.status = 204;
    const auto origin = allowed_origin(origins, req);
    if (!origin) return;  // not ours to allow: the browser refuses the request
    const std::string asked = requested_headers(req);
    res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type" + (asked.empty() ? "" : ", " + asked));
    res.set_header("Access-Control-Max-Age", "600");
  });
  // Runs on every answer just before its headers go out, the streamed ones
  // and the error handler's included.
  http.set_post_routing_handler([origins = std::move(origins)](const httplib::Request& req, httplib::Response& res) {
    const auto origin = allowed_origin(origins, req);
    if (!origin) return;
    res.set_header("Access-Control-Allow-Origin", *origin);
    if (*origin != "*") res.set_header("Vary", "Origin");
    res.set_header("Access-Control-Expose-Headers", "Retry-After");
  });
}

void install_connection_limit(httplib::Server& http, size_t num_threads, size_t max_connections, int retry_after_s,
                              std::atomic<int64_t>& num_rejected) {
  // More workers than connections allowed would never run.
  if (max_connections > 0) num_threads = std::min(num_threads, max_connections);
  http.new_task_queue = [num_threads, max_connections, &num_rejected] {
    return new LimitedTaskQueue(num_threads, max_connections, num_rejected);
  };
  http.set_pre_routing_handler([max_connections, retry_after_s](const httplib::Request&, httplib::Response& res) {
    if (!LimitedTaskQueue::over_limit()) return httplib::Server::HandlerResponse::Unhandled;
    res.set_header("Connection", "close");
    send_overloaded(res, retry_after_s,
                    fmt::format("the server has {} connections open, its limit (--max-connections); retry later",
                                max_connections),
                    "too_many_connections");
    return httplib::Server::HandlerResponse::Handled;
  });
}

void add_web_routes(httplib::Server& http, RouteTable& routes) {
  for (const WebAsset& asset : web_assets()) {
    auto serve = [&asset](const httplib::Request&, httplib::Response& res) {
      res.set_header("Cache-Control", "no-cache");
      res.set_content(asset.bytes.data(), asset.bytes.size(), std::string(asset.content_type));
    };
    http.Get(std::string(asset.path), serve);
    routes.allow(std::string(asset.path), "GET");
    if (asset.path == "/index.html") {
      http.Get("/", serve);
      routes.allow("/", "GET");
    }
  }
}

namespace {

void check_readable(const std::string& path, const char* flag) {
  std::ifstream in(path);
  if (!in) throw_error(ErrorCode::kNotFound, "{} {}: cannot read it", flag, path);
}

}  // namespace

std::unique_ptr<httplib::Server> make_http_server(const std::string& cert_file, const std::string& key_file) {
  if (cert_file.empty() && key_file.empty()) return std::make_unique<httplib::Server>();
  if (cert_file.empty() || key_file.empty())
    throw_error(ErrorCode::kInvalidArgument, "--ssl-cert-file and --ssl-key-file go together (HTTPS needs both)");
  check_readable(cert_file, "--ssl-cert-file");
  check_readable(key_file, "--ssl-key-file");
  auto https = std::make_unique<httplib::SSLServer>(cert_file.c_str(), key_file.c_str());
  if (!https->is_valid())
    throw_error(ErrorCode::kInvalidArgument,
                "--ssl-cert-file {} and --ssl-key-file {}: OpenSSL cannot load them as a PEM certificate and its "
                "private key",
                cert_file, key_file);
  return https;
}

int bind_http(httplib::Server& http, const std::string& host, int port) {
  // Small writes (an SSE chunk after the headers) go out at once: with
  // Nagle's algorithm a chunk waits for the ACK of the one before, and a
  // kept-alive peer (a router's pooled connection) delays that ACK 40 ms.
  http.set_tcp_nodelay(true);
  http.set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  const int bound = port == 0 ? http.bind_to_any_port(host) : (http.bind_to_port(host, port) ? port : -1);
  if (bound < 0)
    throw_error(ErrorCode::kUnavailable, "cannot listen on {}:{} (in use, or not an address of this machine)", host,
                port);
  raise_listen_backlog(bound);
  return bound;
}

}  // namespace kvlm
