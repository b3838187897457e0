#include "wire/http/front.h"

#include <cctype>

#include <fmt/format.h>

#include "common/error.h"
#include "common/log.h"
#include "tokenizer/unicode.h"
#include "wire/openai/json_text.h"
#include "wire/web_assets.h"

namespace kvlm {

using openai::Json;

void send_error(http::Response& res, const openai::RequestError& e) {
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

void send_internal_error(http::Response& res, const http::Request& req, std::string_view what) {
  const std::string id = openai::new_id("err");
  log_error("{} {} {}: internal error: {}", id, unicode::sanitize_utf8(req.method), unicode::sanitize_utf8(req.path),
            unicode::sanitize_utf8(what));
  send_error(res, {500, fmt::format("internal error (logged as {})", id), std::nullopt, "server_error"});
}

std::optional<Json> parse_body(const http::Request& req, http::Response& res) {
  try {
    return openai::parse_json(req.body);
  } catch (const Error& e) {
    send_error(res, {400, fmt::format("the request body is {}", e.what()), std::nullopt});
    return std::nullopt;
  }
}

void send_shutting_down(http::Response& res, const std::string& message) {
  openai::RequestError e{503, message, std::nullopt, "server_error"};
  e.code = "server_shutting_down";
  send_error(res, e);
}

void send_model_not_found(http::Response& res, const std::string& model) {
  openai::RequestError e{404, fmt::format("The model '{}' does not exist: this server serves the names GET /v1/models lists.",
                                          unicode::sanitize_utf8(model)),
                         std::string("model")};
  e.code = "model_not_found";
  send_error(res, e);
}

void send_overloaded(http::Response& res, int retry_after_s, const std::string& message, const char* code) {
  openai::RequestError e{503, message, std::nullopt, "server_error"};
  e.code = code;
  send_error(res, e);
  res.set_header("Retry-After", std::to_string(retry_after_s));
}

void send_unauthorized(http::Response& res) {
  openai::RequestError e{401, "Incorrect API key provided: send 'Authorization: Bearer <key>'.", std::nullopt};
  e.code = "invalid_api_key";
  send_error(res, e);
}

std::string transport_error_body(int status, const std::string& message, const std::string& code) {
  openai::RequestError e{status, unicode::sanitize_utf8(message), std::nullopt};
  if (status >= 500) e.type = "server_error";
  if (!code.empty()) e.code = code;
  return openai::dump_json(openai::error_json(e));
}

RouteHandler with_access(FrontDoor& door, Access access, RouteHandler handler) {
  return [&door, access, handler = std::move(handler)](http::Request& req, http::Response& res) {
    const bool metrics_key = !door.metrics_key.empty() && presents_key(req, door.metrics_key);
    if (access == Access::kMetrics) {
      if (!door.metrics_key.empty() && !metrics_key) return send_unauthorized(res);
    } else if (access == Access::kStatus && metrics_key) {
      // the monitor's key
    } else if (access != Access::kPublic && door.keys.enabled()) {
      std::shared_ptr<KeyState> key = door.keys.find(req, &req.key_name);
      if (!key) return send_unauthorized(res);
      if (access == Access::kMetered) {
        auto admitted = door.keys.admit(key, res);
        if (!admitted) return;  // answered 429
        req.key_ticket = std::move(*admitted);
      }
    }
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
  };
}

void charge_tokens(const http::Request& req, int64_t num_tokens) {
  if (req.key_ticket && num_tokens > 0) req.key_ticket->charge_tokens(num_tokens);
}

void RouteTable::add(const std::string& method, const std::string& path, RouteHandler handler) {
  Route r{method, path, std::nullopt, std::move(handler)};
  if (path.find('(') != std::string::npos) r.pattern.emplace(path);
  routes_.push_back(std::move(r));
}

namespace {

// The origin a CORS answer allows for `req`: "*", its own Origin when
// listed, or nothing.
std::optional<std::string> allowed_origin(const std::vector<std::string>& origins, const http::Request& req) {
  const std::string* origin = http::find_header(req.headers, "Origin");
  if (!origin) return std::nullopt;
  for (const std::string& o : origins) {
    if (o == "*") return std::string("*");
    if (o == *origin) return *origin;
  }
  return std::nullopt;
}

// The header names a preflight asks for, kept to the characters header
// names have: the value is echoed back in a header of ours.
std::string requested_headers(const http::Request& req) {
  std::string out;
  for (char c : req.get_header_value("Access-Control-Request-Headers"))
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == ',' || c == ' ') out += c;
  return out;
}

void send_route_error(http::Response& res, int status, std::string message) {
  send_error(res, {status, unicode::sanitize_utf8(message), std::nullopt});
}

}  // namespace

void RouteTable::handle(http::Request& req, http::Response& res) const {
  if (req.method == "OPTIONS" && !cors_origins_.empty()) {
    res.status = 204;
    if (!allowed_origin(cors_origins_, req)) return;  // not ours to allow: the browser refuses the request
    const std::string asked = requested_headers(req);
    res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type" + (asked.empty() ? "" : ", " + asked));
    res.set_header("Access-Control-Max-Age", "600");
    return;
  }
  const std::string method = req.method == "HEAD" ? "GET" : req.method;
  std::vector<std::string> allowed;
  for (const Route& r : routes_) {
    std::smatch m;
    if (r.pattern ? !std::regex_match(req.path, m, *r.pattern) : r.path != req.path) continue;
    if (r.method != method) {
      allowed.push_back(r.method);
      continue;
    }
    req.matches.clear();
    if (r.pattern)
      for (const auto& group : m) req.matches.push_back(group.str());
    return r.handler(req, res);
  }
  if (allowed.empty()) return send_route_error(res, 404, fmt::format("no route {} {}", req.method, req.path));
  std::string allow;
  for (const std::string& m : allowed) allow += (allow.empty() ? "" : ", ") + m;
  if (std::find(allowed.begin(), allowed.end(), "GET") != allowed.end()) allow += ", HEAD";
  send_route_error(res, 405, fmt::format("{} is not allowed on {}; use {}", req.method, req.path, allow));
  res.set_header("Allow", allow);
}

void RouteTable::decorate(const http::Request& req, http::Response& res) const {
  if (shaper_) shaper_(req, res);
  if (cors_origins_.empty()) return;
  const auto origin = allowed_origin(cors_origins_, req);
  if (!origin) return;
  res.set_header("Access-Control-Allow-Origin", *origin);
  if (*origin != "*") res.set_header("Vary", "Origin");
  res.set_header("Access-Control-Expose-Headers", "Retry-After");
}

void add_web_routes(RouteTable& routes) {
  for (const WebAsset& asset : web_assets()) {
    auto serve = [&asset](http::Request&, http::Response& res) {
      res.set_header("Cache-Control", "no-cache");
      res.set_content(std::string(asset.bytes.data(), asset.bytes.size()), asset.content_type);
    };
    routes.get(std::string(asset.path), serve);
    if (asset.path == "/index.html") routes.get("/", serve);
  }
}

std::unique_ptr<http::HttpServer> make_http_server(const http::ServerLimits& limits, const RouteTable& routes,
                                                   const std::string& cert_file, const std::string& key_file) {
  auto server = std::make_unique<http::HttpServer>(
      limits, [&routes](http::Request& req, http::Response& res) { routes.handle(req, res); }, transport_error_body,
      cert_file, key_file);
  server->set_decorate([&routes](const http::Request& req, http::Response& res) { routes.decorate(req, res); });
  return server;
}

}  // namespace kvlm
