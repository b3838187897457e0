#include "wire/http/request_parser.h"

#include <algorithm>
#include <cctype>
#include <optional>

#include <fmt/format.h>

namespace kvlm::http {
namespace {

// A chunk-size line (the size and any chunk extensions) may be this long.
constexpr size_t kMaxChunkLine = 4096;
// Empty lines a client may send before a request line (RFC 9112 §2.2).
constexpr size_t kMaxLeadingEmptyLines = 8;

bool is_tchar(unsigned char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  switch (c) {
    case '!': case '#': case '$': case '%': case '&': case '\'': case '*': case '+': case '-': case '.':
    case '^': case '_': case '`': case '|': case '~': return true;
    default: return false;
  }
}

bool is_token(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!is_tchar(static_cast<unsigned char>(c))) return false;
  return true;
}

// A field value's byte: HTAB, SP, visible ASCII or obs-text.
bool is_value_byte(unsigned char c) { return c == '\t' || (c >= 0x20 && c != 0x7f); }

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// What a client sent, for a message: printable, and not too long.
std::string excerpt(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 64)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (s.size() > 64) out += "...";
  return "'" + out + "'";
}

// Each comma-separated element of the header values named `name`, trimmed.
template <class Visit>
void each_element(const Headers& headers, std::string_view name, Visit visit) {
  for (const Header& h : headers) {
    if (!iequals(h.name, name)) continue;
    std::string_view v = h.value;
    for (;;) {
      const size_t comma = v.find(',');
      visit(trim_ows(v.substr(0, comma)));
      if (comma == std::string_view::npos) break;
      v.remove_prefix(comma + 1);
    }
  }
}

size_t count_headers(const Headers& headers, std::string_view name) {
  size_t n = 0;
  for (const Header& h : headers) n += iequals(h.name, name) ? 1 : 0;
  return n;
}

}  // namespace

RequestParser::RequestParser(ParseLimits limits) : limits_(limits) { reset(); }

void RequestParser::reset() {
  request_ = Request{};
  error_ = ParseError{};
  phase_ = Phase::kHead;
  started_ = expects_continue_ = chunked_ = false;
  keep_alive_ = true;
  remaining_ = 0;
  num_trailer_bytes_ = num_trailers_ = 0;
  scanned_ = 0;
  num_empty_lines_ = 0;
}

RequestParser::State RequestParser::fail(int status, std::string message, const char* reason) {
  error_ = {status, std::move(message), reason};
  keep_alive_ = false;
  return State::kError;
}

bool RequestParser::refuse(int status, std::string message, const char* reason) {
  fail(status, std::move(message), reason);
  return false;
}

RequestParser::State RequestParser::feed(std::string& in) {
  if (phase_ == Phase::kHead) return parse_head(in);
  return parse_body(in);
}

// The head is parsed once it is all here ("\r\n\r\n"): a partial head costs
// only its bytes, and the scan resumes where it stopped, so a head sent a
// byte at a time is still read in linear time.
RequestParser::State RequestParser::parse_head(std::string& in) {
  // Empty lines before the request line (a client's stray CRLF after a body).
  while (in.size() >= 2 && in[0] == '\r' && in[1] == '\n') {
    if (++num_empty_lines_ > kMaxLeadingEmptyLines)
      return fail(400, "too many empty lines before the request line", "bad_request");
    in.erase(0, 2);
    scanned_ = scanned_ >= 2 ? scanned_ - 2 : 0;
    started_ = true;
  }
  if (!in.empty()) started_ = true;
  // Only the first max_head_bytes are looked at: whatever follows them, the
  // answer is the same 431 however the bytes were cut into reads.
  size_t end = std::string::npos;
  const size_t limit = std::min(in.size(), limits_.max_head_bytes);
  for (size_t i = scanned_; i < limit; ++i) {
    if (in[i] != '\n') continue;
    if (i == 0 || in[i - 1] != '\r') return fail(400, "a line of the request head ends without CR (lines end with CRLF)", "bad_request");
    if (i >= 3 && in[i - 2] == '\n' && in[i - 3] == '\r') {
      end = i + 1;
      break;
    }
  }
  if (end == std::string::npos) {
    scanned_ = limit;
    if (in.size() > limits_.max_head_bytes)
      return fail(431, fmt::format("the request head is larger than {} bytes", limits_.max_head_bytes), "header_too_large");
    return State::kNeedMore;
  }
  const std::string head = in.substr(0, end - 4);  // without the empty line's CRLF and the last CRLF
  in.erase(0, end);
  scanned_ = 0;
  std::string_view rest = head;

  const size_t first = rest.find("\r\n");
  if (!parse_request_line(rest.substr(0, first))) return State::kError;
  rest = first == std::string_view::npos ? std::string_view() : rest.substr(first + 2);
  while (!rest.empty()) {
    const size_t eol = rest.find("\r\n");
    if (!parse_header_line(rest.substr(0, eol))) return State::kError;
    if (eol == std::string_view::npos) break;
    rest.remove_prefix(eol + 2);
  }
  if (!check_framing()) return State::kError;
  return State::kHeadDone;
}

bool RequestParser::parse_request_line(std::string_view line) {
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos) {
    refuse(400, fmt::format("malformed request line {} (METHOD SP TARGET SP HTTP/1.1)", excerpt(line)), "bad_request");
    return false;
  }
  const std::string_view method = line.substr(0, sp1), target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (!is_token(method)) {
    fail(400, fmt::format("malformed method {}", excerpt(method)), "bad_request");
    return false;
  }
  if (version == "HTTP/1.1") {
    request_.minor_version = 1;
  } else if (version == "HTTP/1.0") {
    request_.minor_version = 0;
    keep_alive_ = false;
  } else if (version.size() == 8 && version.substr(0, 5) == "HTTP/" && std::isdigit(static_cast<unsigned char>(version[5])) &&
             version[6] == '.' && std::isdigit(static_cast<unsigned char>(version[7]))) {
    fail(505, fmt::format("{} is not supported: this server speaks HTTP/1.1 and HTTP/1.0", excerpt(version)),
         "bad_version");
    return false;
  } else {
    fail(400, fmt::format("malformed HTTP version {}", excerpt(version)), "bad_request");
    return false;
  }
  request_.method = std::string(method);
  return parse_target(target);
}

bool RequestParser::parse_target(std::string_view target) {
  for (char c : target) {
    if (static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) >= 0x7f) {
      fail(400, "the request target holds a byte that is not visible ASCII", "bad_request");
      return false;
    }
  }
  request_.target = std::string(target);
  std::string_view origin = target;
  for (std::string_view scheme : {"http://", "https://"}) {
    if (origin.size() >= scheme.size() && iequals(origin.substr(0, scheme.size()), scheme)) {
      origin.remove_prefix(scheme.size());  // absolute-form: the authority goes, the path stays
      const size_t slash = origin.find_first_of("/?");
      origin = slash == std::string_view::npos ? std::string_view("/") : origin.substr(slash);
      if (origin.front() == '?') {
        request_.path = "/";
        request_.query = std::string(origin.substr(1));
        return true;
      }
    }
  }
  if (origin == "*") {
    request_.path = "*";
    return true;
  }
  if (origin.empty() || origin.front() != '/' || origin.find('#') != std::string_view::npos) {
    fail(400, fmt::format("malformed request target {}", excerpt(target)), "bad_request");
    return false;
  }
  const size_t q = origin.find('?');
  if (q != std::string_view::npos) request_.query = std::string(origin.substr(q + 1));
  if (!percent_decode(origin.substr(0, q), request_.path, false) ||
      request_.path.find('\0') != std::string::npos) {
    fail(400, fmt::format("the path {} has a malformed percent escape or a NUL", excerpt(origin.substr(0, q))),
         "bad_request");
    return false;
  }
  return true;
}

bool RequestParser::parse_header_line(std::string_view line) {
  if (line.empty() || line.front() == ' ' || line.front() == '\t') {
    fail(400, "a folded header line (obs-fold) is not accepted", "bad_request");
    return false;
  }
  const size_t colon = line.find(':');
  const std::string_view name = line.substr(0, colon);
  if (colon == std::string_view::npos || !is_token(name)) {
    const bool space = colon != std::string_view::npos && !name.empty() && (name.back() == ' ' || name.back() == '\t');
    fail(400,
         space ? fmt::format("whitespace between the header name {} and its colon", excerpt(trim_ows(name)))
               : fmt::format("malformed header line {}", excerpt(line)),
         "bad_request");
    return false;
  }
  const std::string_view value = trim_ows(line.substr(colon + 1));
  for (char c : value) {
    if (!is_value_byte(static_cast<unsigned char>(c))) {
      fail(400, fmt::format("a control byte in the value of header {}", excerpt(name)), "bad_request");
      return false;
    }
  }
  if (request_.headers.size() >= limits_.max_headers) {
    fail(431, fmt::format("more than {} headers", limits_.max_headers), "too_many_headers");
    return false;
  }
  request_.headers.push_back({std::string(name), std::string(value)});
  return true;
}

bool RequestParser::check_framing() {
  const Headers& h = request_.headers;
  std::optional<uint64_t> length;
  bool bad_length = false, too_large = false;
  each_element(h, "Content-Length", [&](std::string_view v) {
    uint64_t n = 0;
    bool digits = !v.empty();
    for (char c : v) digits = digits && c >= '0' && c <= '9';
    if (!digits) return void(bad_length = true);
    if (v.size() > 18) return void(too_large = true);  // past any body limit, and past int64 at 19+
    for (char c : v) n = n * 10 + static_cast<uint64_t>(c - '0');
    if (length && *length != n) bad_length = true;
    length = n;
  });
  if (bad_length) return refuse(400, "Content-Length must be one non-negative decimal number", "bad_framing");
  const size_t num_te = count_headers(h, "Transfer-Encoding");
  if (num_te > 0) {
    if (request_.minor_version == 0)
      return refuse(400, "Transfer-Encoding in an HTTP/1.0 request", "bad_framing");
    if (length || too_large)
      return refuse(400, "Content-Length and Transfer-Encoding together", "bad_framing");
    const std::string* te = find_header(h, "Transfer-Encoding");
    if (num_te > 1 || !iequals(trim_ows(*te), "chunked"))
      return refuse(400, fmt::format("Transfer-Encoding {} is not accepted: only 'chunked'", excerpt(*te)), "bad_framing");
    chunked_ = true;
  }
  if (too_large || (length && *length > limits_.max_body_bytes))
    return refuse(413, fmt::format("the request body is larger than {} bytes", limits_.max_body_bytes), "body_too_large");
  if (count_headers(h, "Host") > 1) return refuse(400, "two Host headers", "bad_request");
  if (const std::string* expect = find_header(h, "Expect")) {
    if (!iequals(*expect, "100-continue"))
      return refuse(417, fmt::format("Expect {} is not supported (only 100-continue)", excerpt(*expect)), "bad_expect");
    expects_continue_ = chunked_ || (length && *length > 0);
  }
  each_element(h, "Connection", [&](std::string_view token) {
    if (iequals(token, "close")) keep_alive_ = false;
    if (iequals(token, "keep-alive") && request_.minor_version == 0) keep_alive_ = true;
  });
  if (chunked_) {
    phase_ = Phase::kChunkSize;
  } else if (length && *length > 0) {
    phase_ = Phase::kLengthBody;
    remaining_ = static_cast<int64_t>(*length);
  } else {
    phase_ = Phase::kDone;
  }
  return true;
}

bool RequestParser::take_line(std::string& in, size_t max, std::string& line, bool& failed) {
  failed = false;
  for (size_t i = scanned_; i < in.size(); ++i) {
    if (in[i] != '\n') continue;
    if (i == 0 || in[i - 1] != '\r') {
      failed = true;
      fail(400, "a line of the chunked body ends without CR (lines end with CRLF)", "bad_framing");
      return false;
    }
    if (i > max) {
      failed = true;
      fail(400, fmt::format("a line of the chunked body is longer than {} bytes", max), "bad_framing");
      return false;
    }
    line.assign(in, 0, i - 1);
    in.erase(0, i + 1);
    scanned_ = 0;
    return true;
  }
  scanned_ = in.size();
  if (in.size() > max) {
    failed = true;
    fail(400, fmt::format("a line of the chunked body is longer than {} bytes", max), "bad_framing");
  }
  return false;
}

RequestParser::State RequestParser::parse_chunk_size(std::string& in) {
  std::string line;
  bool failed = false;
  if (!take_line(in, kMaxChunkLine, line, failed)) return failed ? State::kError : State::kNeedMore;
  size_t digits = 0;
  uint64_t size = 0;
  while (digits < line.size() && hex_digit(line[digits]) >= 0) {
    if (digits == 15) return fail(413, "a chunk size past any body limit", "body_too_large");
    size = size * 16 + static_cast<uint64_t>(hex_digit(line[digits++]));
  }
  std::string_view ext = std::string_view(line).substr(digits);
  ext = trim_ows(ext);
  bool ext_ok = ext.empty() || ext.front() == ';';
  for (char c : ext) ext_ok = ext_ok && is_value_byte(static_cast<unsigned char>(c));
  if (digits == 0 || !ext_ok) return fail(400, fmt::format("malformed chunk size {}", excerpt(line)), "bad_framing");
  if (request_.body.size() + size > limits_.max_body_bytes)
    return fail(413, fmt::format("the request body is larger than {} bytes", limits_.max_body_bytes), "body_too_large");
  if (size == 0) {
    phase_ = Phase::kTrailers;
  } else {
    phase_ = Phase::kChunkData;
    remaining_ = static_cast<int64_t>(size);
  }
  return State::kNeedMore;
}

// A chunked body's trailer fields: checked as headers are, counted against
// the head's limits, and dropped (no route reads them).
RequestParser::State RequestParser::parse_trailers(std::string& in) {
  std::string line;
  bool failed = false;
  while (take_line(in, limits_.max_head_bytes, line, failed)) {
    if (line.empty()) {
      phase_ = Phase::kDone;
      return State::kComplete;
    }
    num_trailer_bytes_ += line.size() + 2;
    if (num_trailer_bytes_ > limits_.max_head_bytes)
      return fail(431, fmt::format("the trailers are larger than {} bytes", limits_.max_head_bytes), "header_too_large");
    if (++num_trailers_ > limits_.max_headers)
      return fail(431, fmt::format("more than {} trailer fields", limits_.max_headers), "too_many_headers");
    const size_t num_headers = request_.headers.size();
    if (!parse_header_line(line)) return State::kError;
    request_.headers.resize(num_headers);
  }
  return failed ? State::kError : State::kNeedMore;
}

RequestParser::State RequestParser::parse_body(std::string& in) {
  for (;;) {
    switch (phase_) {
      case Phase::kHead: return State::kNeedMore;  // not reached: feed() parses the head first
      case Phase::kDone: return State::kComplete;
      case Phase::kLengthBody:
      case Phase::kChunkData: {
        const size_t n = std::min(in.size(), static_cast<size_t>(remaining_));
        request_.body.append(in, 0, n);
        in.erase(0, n);
        remaining_ -= static_cast<int64_t>(n);
        if (remaining_ > 0) return State::kNeedMore;
        phase_ = phase_ == Phase::kLengthBody ? Phase::kDone : Phase::kChunkEnd;
        break;
      }
      case Phase::kChunkEnd:
        if (in.size() < 2) {
          if (!in.empty() && in[0] != '\r') return fail(400, "a chunk's data is not followed by CRLF", "bad_framing");
          return State::kNeedMore;
        }
        if (in[0] != '\r' || in[1] != '\n') return fail(400, "a chunk's data is not followed by CRLF", "bad_framing");
        in.erase(0, 2);
        phase_ = Phase::kChunkSize;
        break;
      case Phase::kChunkSize: {
        const State s = parse_chunk_size(in);
        if (s == State::kError) return s;
        if (phase_ == Phase::kChunkSize) return State::kNeedMore;
        break;
      }
      case Phase::kTrailers: return parse_trailers(in);
    }
  }
}

}  // namespace kvlm::http
