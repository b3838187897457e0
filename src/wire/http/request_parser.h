// A strict, incremental HTTP/1.1 request parser (RFC 9112), written for a
// server that faces the network: every request is framed one way only, and
// anything another parser could read differently is refused, so no request
// can hide inside another (request smuggling).
//
// Refused, with the status the connection answers before it closes:
//   400  a malformed request line or header line; a line not ended by CRLF;
//        whitespace before a header's colon; a folded (obs-fold) header; a
//        control byte in a value; a Content-Length that is not a decimal
//        number, or two that differ; any Transfer-Encoding but exactly
//        "chunked"; Transfer-Encoding in an HTTP/1.0 request; Content-Length
//        beside Transfer-Encoding; a bad chunk size or chunk end; two Host
//        headers; a path with a bad percent escape or a NUL
//   413  a body (declared or chunked) over the body limit
//   417  an Expect other than 100-continue
//   431  a request head over the head limit, or more headers than allowed
//   505  an HTTP version other than 1.0 and 1.1
// Bytes after a complete request stay in the buffer: the next request
// (pipelining) is parsed from them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "wire/http/message.h"

namespace kvlm::http {

struct ParseLimits {
  size_t max_head_bytes = 64 << 10;  // request line + headers (+ a chunked body's trailers)
  size_t max_headers = 100;
  size_t max_body_bytes = 32 << 20;
};

// Why a request was refused: its status, a message for the client, and a
// short reason for the metrics (kvlm_http_refused_total{reason=...}).
struct ParseError {
  int status = 400;
  std::string message;
  const char* reason = "bad_request";
};

class RequestParser {
 public:
  enum class State {
    kNeedMore,  // every byte was consumed; feed more
    kHeadDone,  // the head is complete (returned once); feed again for the body
    kComplete,  // the request is complete: request() is it
    kError,     // refused: error() says why; the connection must close
  };

  explicit RequestParser(ParseLimits limits = {});

  // Starts the next request (keeps the limits).
  void reset();
  // Parses from the front of `in`, erasing what it consumed.
  State feed(std::string& in);

  Request& request() { return request_; }
  const ParseError& error() const { return error_; }
  // Whether any byte of this request (or of empty lines before it) came.
  bool started() const { return started_; }
  bool head_done() const { return phase_ > Phase::kHead; }
  // The head asked for "100 Continue" before sending its body.
  bool expects_continue() const { return expects_continue_; }
  // Whether the connection may carry another request after this one.
  bool keep_alive() const { return keep_alive_; }
  // Body bytes still to come when the body's length is declared (0 otherwise).
  int64_t body_remaining() const { return phase_ == Phase::kLengthBody ? remaining_ : 0; }
  size_t body_received() const { return request_.body.size(); }

 private:
  enum class Phase { kHead, kLengthBody, kChunkSize, kChunkData, kChunkEnd, kTrailers, kDone };

  State fail(int status, std::string message, const char* reason);
  bool refuse(int status, std::string message, const char* reason);  // fail(), for the bool steps
  State parse_head(std::string& in);
  bool parse_request_line(std::string_view line);
  bool parse_header_line(std::string_view line);
  bool parse_target(std::string_view target);
  bool check_framing();
  State parse_body(std::string& in);
  State parse_chunk_size(std::string& in);
  State parse_trailers(std::string& in);
  // Takes one CRLF-ended line from `in` (without the CRLF); false when none
  // is complete yet. Fails the request for a bare LF or a line over `max`.
  bool take_line(std::string& in, size_t max, std::string& line, bool& failed);

  ParseLimits limits_;
  Request request_;
  ParseError error_;
  Phase phase_ = Phase::kHead;
  bool started_ = false;
  bool expects_continue_ = false;
  bool keep_alive_ = true;
  bool chunked_ = false;
  int64_t remaining_ = 0;     // kLengthBody: body bytes; kChunkData: this chunk's
  size_t num_trailer_bytes_ = 0;
  size_t num_trailers_ = 0;
  size_t num_empty_lines_ = 0;
  size_t scanned_ = 0;  // bytes of `in` already searched for the end of a line or of the head
};

}  // namespace kvlm::http
