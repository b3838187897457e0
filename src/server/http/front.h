// The HTTP front that kvlm serve and kvlm router share: OpenAI-style error
// answers, the API key check, the transport's own refusals (unknown route,
// wrong method, body too large, malformed request) as OpenAI JSON, the
// connection cap, and a table of routes that knows each path's methods.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <httplib.h>

#include "server/http/api_keys.h"
#include "server/openai/protocol.h"

namespace kvlm {

class Error;

// Writes an OpenAI-style error with its status.
void send_error(httplib::Response& res, const openai::RequestError& e);
// The OpenAI-style error for a kvlm::Error: 400 for the client's faults, 404,
// 503, else 500 ("server_error").
openai::RequestError error_for(const Error& e);
// Answers 500 for a fault of ours (an exception no validation expected): logs
// `what` with a fresh id that the message repeats, so the log line can be found.
void send_internal_error(httplib::Response& res, const httplib::Request& req, std::string_view what);
// Parses the body as JSON or answers 400; nullopt then.
std::optional<openai::Json> parse_body(const httplib::Request& req, httplib::Response& res);
// The 503 of a limit: Retry-After, an OpenAI error with `code`.
void send_overloaded(httplib::Response& res, int retry_after_s, const std::string& message, const char* code);

// The 503 of a server that is draining (code server_shutting_down): another
// replica can take the request.
void send_shutting_down(httplib::Response& res, const std::string& message);
// The 404 of a model the server does not serve: code model_not_found, as
// OpenAI answers a model that does not exist.
void send_model_not_found(httplib::Response& res, const std::string& model);

// The 401 of a missing or wrong key.
void send_unauthorized(httplib::Response& res);

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

// `handler` behind `access`: a missing or wrong key is a 401, a key past its
// limits a 429; a metered request holds its key's ticket until its response
// has been sent, charged with the tokens its usage reports
// (charge_current_request). What the handler throws is answered as OpenAI
// errors are (a kvlm::Error by its code, anything else a logged 500).
using RouteHandler = std::function<void(const httplib::Request&, httplib::Response&)>;
RouteHandler with_access(FrontDoor& door, Access access, RouteHandler handler);

// TLS: an HTTPS server on the PEM certificate and key files, or plain HTTP
// when both are empty. Throws Error(kInvalidArgument / kNotFound) naming the
// flag for one alone, a file that cannot be read, or a pair OpenSSL refuses.
std::unique_ptr<httplib::Server> make_http_server(const std::string& cert_file, const std::string& key_file);

// The routes of one server: registers handlers with httplib and remembers
// each path's methods, so the error handler can answer a known path asked
// with another method 405 (with Allow) instead of 404.
class RouteTable {
 public:
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;
  explicit RouteTable(httplib::Server& http) : http_(http) {}
  // POST handlers get the whole body as JSON text whatever its
  // Content-Type (httplib would treat curl -d's form type as a form and
  // refuse one over 8 KiB).
  void post(const std::string& path, Handler handler);
  void get(const std::string& path, Handler handler);
  void del(const std::string& path, Handler handler);  // DELETE
  void allow(const std::string& path, const std::string& method) { allowed_[path].insert(method); }
  // Answers the transport's refusals as OpenAI JSON (install once, after
  // every route).
  void install_error_handlers();

 private:
  httplib::Server& http_;
  std::map<std::string, std::set<std::string>> allowed_;
};

// CORS for browser apps served from another origin (docs/server.md "CORS"):
// a request whose Origin is one of `origins` ("*": any origin) gets
// Access-Control-Allow-Origin on its answer (errors, refusals and streams
// included), and its preflight (OPTIONS on any path, no API key) is answered
// 204 allowing GET and POST with Authorization, Content-Type and the other
// headers it asks for. Without origins it installs nothing: browsers then
// keep other sites' pages from reading the answers. Uses httplib's
// post-routing handler and OPTIONS route; call once, before serving.
void install_cors(httplib::Server& http, std::vector<std::string> origins);

// The transport's workers behind a connection cap: past `max_connections`
// (0: none) a connection's request is answered 503 (Retry-After,
// too_many_connections) and closed; `num_rejected` counts them and must
// outlive the server.
void install_connection_limit(httplib::Server& http, size_t num_threads, size_t max_connections, int retry_after_s,
                              std::atomic<int64_t>& num_rejected);

// GET / and the chat page's files (no key: the page asks for one), with
// their paths in `routes` (for 405s).
void add_web_routes(httplib::Server& http, RouteTable& routes);

// Binds `host:port` (port 0: any free port) with SO_REUSEADDR only (not
// httplib's SO_REUSEPORT, which lets a second server share the port) and a
// full listen backlog. Returns the port; throws Error(kUnavailable).
int bind_http(httplib::Server& http, const std::string& host, int port);

}  // namespace kvlm
