// The HTTP messages of kvlm's own transport (http_server.h): a request as the
// strict parser read it, the response a handler fills, and the two ways an
// answer can come later without holding a thread — a body streamed as it is
// produced (SSE) and a whole answer produced over time (a generation) — both
// driven by a Producer the transport polls whenever its Waker is called.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvlm {
class KeyTicket;
}

namespace kvlm::http {

using Clock = std::chrono::steady_clock;

struct Header {
  std::string name;
  std::string value;
};
using Headers = std::vector<Header>;

// The value of the first header named `name` (ASCII case-insensitive), or null.
const std::string* find_header(const Headers& headers, std::string_view name);
bool iequals(std::string_view a, std::string_view b);

struct Request {
  std::string method;
  std::string target;  // as sent: the path and the query
  std::string path;    // percent-decoded
  std::string query;   // after '?', as sent
  int minor_version = 1;  // HTTP/1.<minor>
  Headers headers;
  std::string body;    // the whole body (chunked bodies decoded)
  std::string remote_addr;
  int remote_port = 0;
  int local_port = 0;
  // A pattern route's match: [0] the whole path, then its groups.
  std::vector<std::string> matches;
  // The API key's claim of a metered request (wire/http/api_keys.h): held
  // until the answer has been written; its tokens are charged where the
  // answer's usage becomes known.
  std::shared_ptr<KeyTicket> key_ticket;
  // The name of the API key the request presented (set by with_access on
  // every route behind a key): whose stored responses it may read. "" when
  // the server has no keys.
  std::string key_name;
  // Set by the transport when the client hangs up while the request is
  // being answered (shared: the transport writes, handlers read).
  std::shared_ptr<std::atomic<bool>> gone = std::make_shared<std::atomic<bool>>(false);

  std::string get_header_value(std::string_view name) const;
  bool has_header(std::string_view name) const;
  // A query parameter, percent- and '+'-decoded ("" when absent).
  std::string get_param_value(std::string_view name) const;
  bool has_param(std::string_view name) const;
  bool client_gone() const { return gone->load(std::memory_order_relaxed); }
};

// Wakes a Producer's answer: the transport polls it again soon. Thread-safe;
// cheap when a poll is already due.
class Waker {
 public:
  virtual ~Waker() = default;
  virtual void wake() = 0;
  // Wakes once `fd` is readable (or has failed). The fd must stay open until
  // the next poll.
  virtual void wake_when_readable(int fd) = 0;
};

struct Response;

// An answer that comes later. The transport calls start() once, then poll()
// after every wake (and at `wake_at`), one call at a time, never two at once
// and never concurrently with cancel(); after poll() returns kDone or after
// cancel() it calls nothing more.
class Producer {
 public:
  enum class Progress { kPending, kDone };
  virtual ~Producer() = default;
  virtual void start(std::shared_ptr<Waker> waker) = 0;
  // A stream appends what is ready to res.body (the transport sends and
  // clears it); a deferred answer fills `res` when it returns kDone. Sets
  // `wake_at` when it must be polled by then even without a wake (a
  // heartbeat, a deadline); left as it is, no timed poll.
  virtual Progress poll(Response& res, Clock::time_point& wake_at) = 0;
  // The client is gone (or too slow): stop the work behind the answer.
  virtual void cancel() = 0;
  // True when the next poll() may wait on I/O (the router's relay when it
  // must connect to another worker): it then runs on a handler thread
  // rather than the connection's I/O thread. Asked before every poll.
  virtual bool poll_may_block() const { return false; }
};

struct Response {
  int status = 200;
  Headers headers;
  std::string body;
  std::string content_type;
  // A stream sends its status and headers at once and its body as polls
  // produce it (chunked); a deferred answer sends nothing until it is done.
  enum class Later { kNo, kStream, kWhole };
  Later later = Later::kNo;
  std::unique_ptr<Producer> producer;
  bool close = false;  // close the connection after this answer

  void set_content(std::string content, std::string_view type);
  void set_header(std::string name, std::string value);  // replaces one of the same name
  std::string get_header_value(std::string_view name) const;
  bool has_header(std::string_view name) const;
  void stream(std::string_view type, std::unique_ptr<Producer> p);
  void defer(std::unique_ptr<Producer> p);
};

// The reason phrase of a status code ("OK", "Not Found", ...).
std::string_view reason_phrase(int status);
// `s` with %XX decoded (and '+' as a space when `plus_is_space`); false for
// a '%' not followed by two hex digits.
bool percent_decode(std::string_view s, std::string& out, bool plus_is_space);

}  // namespace kvlm::http
