// The HTTP front that kvlm serve and kvlm router share: OpenAI-style error
// answers, the API key check, a table of routes that knows each path's
// methods (404, 405 with Allow, HEAD as GET), CORS, the chat page's files,
// and the server on the transport (http_server.h) with its limits.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include "wire/http/api_keys.h"
#include "wire/http/http_server.h"
#include "wire/http/message.h"
#include "wire/openai/protocol.h"

namespace kvlm {

class Error;

// Writes an OpenAI-style error with its status.
void send_error(http::Response& res, const openai::RequestError& e);
// The OpenAI-style error for a kvlm::Error: 400 for the client's faults, 404,
// 503, else 500 ("server_error").
openai::RequestError error_for(const Error& e);
// Answers 500 for a fault of ours (an exception no validation expected): logs
// `what` with a fresh id that the message repeats, so the log line can be found.
void send_internal_error(http::Response& res, const http::Request& req, std::string_view what);
// Parses the body as JSON or answers 400; nullopt then.
std::optional<openai::Json> parse_body(const http::Request& req, http::Response& res);
// The 503 of a limit: Retry-After, an OpenAI error with `code`.
void send_overloaded(http::Response& res, int retry_after_s, const std::string& message, const char* code);
// The 503 of a server that is draining (code server_shutting_down): another
// replica can take the request.
void send_shutting_down(http::Response& res, const std::string& message);
// The 404 of a model the server does not serve: code model_not_found, as
// OpenAI answers a model that does not exist.
void send_model_not_found(http::Response& res, const std::string& model);
// The 401 of a missing or wrong key.
void send_unauthorized(http::Response& res);
// The JSON body of an error the transport answers itself (http_server.h).
std::string transport_error_body(int status, const std::string& message, const std::string& code);

// Who may call a route (docs/server.md "API keys"):
//   kPublic   anyone (/health, the chat page)
//   kKey      a configured API key, when any is (tokenize, models, ...)
//   kMetered  a key, and within its limits (generation: 429 past them)
//   kMetrics  anyone, or with --metrics-key only that key (/metrics)
//   kStatus   a client key, or the metrics key (/v1/status: the chat page and monitors)
enum class Access { kPublic, kKey, kMetered, kMetrics, kStatus };

// A server's API keys and its metrics key. The keyring is reloaded on
// SIGHUP (ApiKeyring::replace).
struct FrontDoor {
  explicit FrontDoor(std::vector<ApiKey> keys, std::string metrics_key_ = "")
      : keys(std::move(keys)), metrics_key(std::move(metrics_key_)) {}
  ApiKeyring keys;
  std::string metrics_key;
};

using RouteHandler = std::function<void(http::Request&, http::Response&)>;
// `handler` behind `access`: a missing or wrong key is a 401, a key past its
// limits a 429; a metered request's key ticket is set on the request
// (req.key_ticket, held until its answer has been written), for the answer
// to charge the tokens its usage reports. What the handler throws is
// answered as OpenAI errors are (a kvlm::Error by its code, anything else a
// logged 500).
RouteHandler with_access(FrontDoor& door, Access access, RouteHandler handler);
// Charges `num_tokens` to the request's API key (its tokens per minute and
// metrics); nothing without a metered key.
void charge_tokens(const http::Request& req, int64_t num_tokens);

// The routes of one server: exact paths and patterns (std::regex over the
// whole path; its groups in req.matches), each with its methods, so a known
// path asked with another method is a 405 with Allow rather than a 404. HEAD
// is answered by the GET handler without the body.
class RouteTable {
 public:
  void post(const std::string& path, RouteHandler handler) { add("POST", path, std::move(handler)); }
  void get(const std::string& path, RouteHandler handler) { add("GET", path, std::move(handler)); }
  void del(const std::string& path, RouteHandler handler) { add("DELETE", path, std::move(handler)); }
  // The transport's handler: finds the route and calls it, or answers
  // 404 / 405 / a CORS preflight.
  void handle(http::Request& req, http::Response& res) const;
  // CORS for browser apps served from another origin (docs/server.md
  // "CORS"): a request whose Origin is one of `origins` ("*": any) gets
  // Access-Control-Allow-Origin on its answer (errors, refusals and streams
  // included), and its preflight (OPTIONS on any path, no API key) is
  // answered 204 allowing GET and POST with Authorization, Content-Type and
  // the headers it asks for. Without origins nothing is added.
  void set_cors_origins(std::vector<std::string> origins) { cors_origins_ = std::move(origins); }
  // Called on every answer before its head is written (errors of handlers,
  // of this table and of the transport, and answers made later included):
  // how an API's routes give their errors their own shape
  // (anthropic::shape_error).
  using Shaper = std::function<void(const http::Request& req, http::Response& res)>;
  void set_shaper(Shaper shaper) { shaper_ = std::move(shaper); }
  // The shaper's changes, then the CORS headers an answer to `req` carries
  // (the transport's decorator).
  void decorate(const http::Request& req, http::Response& res) const;

 private:
  struct Route {
    std::string method;
    std::string path;
    std::optional<std::regex> pattern;  // set when `path` has a group
    RouteHandler handler;
  };
  void add(const std::string& method, const std::string& path, RouteHandler handler);
  std::vector<Route> routes_;
  std::vector<std::string> cors_origins_;
  Shaper shaper_;
};

// GET / and the chat page's files (no key: the page asks for one).
void add_web_routes(RouteTable& routes);

// The HTTP server of `routes` (TLS with both files set; throws Error naming
// the flag, as http::HttpServer does).
std::unique_ptr<http::HttpServer> make_http_server(const http::ServerLimits& limits, const RouteTable& routes,
                                                   const std::string& cert_file, const std::string& key_file);

}  // namespace kvlm
