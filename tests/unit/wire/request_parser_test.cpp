// The strict HTTP/1.1 request parser (wire/http/request_parser.h): every
// framing rule of RFC 9112 that request smuggling plays on, the limits, and
// the same answer however the bytes are split.
#include "wire/http/request_parser.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvlm::http {
namespace {

using State = RequestParser::State;

struct Parsed {
  State state = State::kNeedMore;
  int status = 0;          // the refusal's, when kError
  std::string reason;      // the refusal's metric reason
  std::string message;
  Request request;
  std::string rest;        // bytes left after the request
};

// Feeds `bytes` in pieces of `step` (0: all at once) until the request is
// complete or refused.
Parsed parse(const std::string& bytes, size_t step = 0, ParseLimits limits = {}) {
  RequestParser p(limits);
  Parsed out;
  std::string in;
  size_t fed = 0;
  for (;;) {
    const size_t n = step == 0 ? bytes.size() - fed : std::min(step, bytes.size() - fed);
    in.append(bytes, fed, n);
    fed += n;
    State s;
    do {
      s = p.feed(in);
    } while (s == State::kHeadDone);
    if (s == State::kComplete || s == State::kError || fed == bytes.size()) {
      out.state = s;
      if (s == State::kError) {
        out.status = p.error().status;
        out.reason = p.error().reason;
        out.message = p.error().message;
      }
      out.request = p.request();
      out.rest = in;
      return out;
    }
  }
}

void expect_refused(const std::string& bytes, int status, const std::string& reason, const std::string& what) {
  for (size_t step : {size_t{0}, size_t{1}, size_t{7}}) {
    const Parsed p = parse(bytes, step);
    EXPECT_EQ(p.state, State::kError) << what << " (step " << step << ")";
    EXPECT_EQ(p.status, status) << what << ": " << p.message;
    EXPECT_EQ(p.reason, reason) << what << ": " << p.message;
  }
}

const std::string kPost = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n";

TEST(RequestParser, AContentLengthBodyTheSameHoweverTheBytesAreSplit) {
  const std::string req = kPost + "Content-Length: 13\r\n\r\n{\"prompt\":\"a\"}GET /next HTTP/1.1\r\n\r\n";
  for (size_t step : {size_t{0}, size_t{1}, size_t{2}, size_t{5}, size_t{64}}) {
    const Parsed p = parse(req, step);
    ASSERT_EQ(p.state, State::kComplete) << step << ": " << p.message;
    EXPECT_EQ(p.request.method, "POST");
    EXPECT_EQ(p.request.path, "/v1/completions");
    EXPECT_EQ(p.request.body, "{\"prompt\":\"a\"");
    // The pipelined request stays for the next parse (by content, at any split).
    if (step == 0) {
      EXPECT_EQ(p.rest, "}GET /next HTTP/1.1\r\n\r\n");
    }
  }
}

TEST(RequestParser, AChunkedBodyWithExtensionsAndTrailers) {
  const std::string req = kPost + "Transfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n";
  for (size_t step : {size_t{0}, size_t{1}, size_t{3}}) {
    const Parsed p = parse(req, step);
    ASSERT_EQ(p.state, State::kComplete) << step << ": " << p.message;
    EXPECT_EQ(p.request.body, "hello world");
    EXPECT_FALSE(p.request.has_header("X-Trailer")) << "trailers are dropped";
    EXPECT_EQ(p.rest, "");
  }
}

TEST(RequestParser, TwoContentLengthsThatDifferAreRefused) {
  expect_refused(kPost + "Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", 400, "bad_framing", "two lengths");
  expect_refused(kPost + "Content-Length: 5, 6\r\n\r\nhello!", 400, "bad_framing", "a list of two lengths");
  // The same length twice is one length (RFC 9112 §6.3).
  EXPECT_EQ(parse(kPost + "Content-Length: 5\r\nContent-Length: 5\r\n\r\nhello").state, State::kComplete);
  EXPECT_EQ(parse(kPost + "Content-Length: 5, 5\r\n\r\nhello").state, State::kComplete);
}

TEST(RequestParser, AContentLengthThatIsNotADecimalNumberIsRefused) {
  for (const std::string v : {"-1", "+5", "0x10", "5 5", "", "1e3", "five", " "})
    expect_refused(kPost + "Content-Length: " + v + "\r\n\r\n", 400, "bad_framing", "Content-Length: " + v);
  // Too large to be a body: 413, answered before a byte of it is read.
  expect_refused(kPost + "Content-Length: 100000000000000000000000\r\n\r\n", 413, "body_too_large", "10^23");
  expect_refused(kPost + "Content-Length: 33554433\r\n\r\n", 413, "body_too_large", "one byte over 32 MiB");
}

TEST(RequestParser, TransferEncodingOtherThanExactlyChunkedIsRefused) {
  for (const std::string v : {"gzip, chunked", "chunked, identity", "xchunked", "chunked;q=1", "identity", "\"chunked\""})
    expect_refused(kPost + "Transfer-Encoding: " + v + "\r\n\r\n0\r\n\r\n", 400, "bad_framing", "TE: " + v);
  expect_refused(kPost + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400,
                 "bad_framing", "two TE headers");
  // Case and surrounding whitespace do not matter.
  EXPECT_EQ(parse(kPost + "Transfer-Encoding:  ChUnKeD \r\n\r\n0\r\n\r\n").state, State::kComplete);
}

TEST(RequestParser, ContentLengthWithTransferEncodingIsRefused) {
  expect_refused(kPost + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, "bad_framing",
                 "CL + TE");
  expect_refused(kPost + "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n", 400, "bad_framing",
                 "TE + CL");
  expect_refused("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, "bad_framing", "TE in 1.0");
}

TEST(RequestParser, BadChunksAreRefused) {
  const std::string te = kPost + "Transfer-Encoding: chunked\r\n\r\n";
  expect_refused(te + "-5\r\nhello\r\n0\r\n\r\n", 400, "bad_framing", "a negative size");
  expect_refused(te + "0x5\r\nhello\r\n0\r\n\r\n", 400, "bad_framing", "a 0x prefix");
  expect_refused(te + " 5\r\nhello\r\n0\r\n\r\n", 400, "bad_framing", "a space before the size");
  expect_refused(te + "\r\nhello\r\n0\r\n\r\n", 400, "bad_framing", "no size");
  expect_refused(te + "5\r\nhelloXX0\r\n\r\n", 400, "bad_framing", "data not followed by CRLF");
  expect_refused(te + "5\nhello\r\n0\r\n\r\n", 400, "bad_framing", "a bare LF");
  expect_refused(te + "fffffffffffffffff\r\n", 413, "body_too_large", "a size past 2^64");
  expect_refused(te + "2000001\r\n", 413, "body_too_large", "one chunk over the limit");
  expect_refused(te + "5;" + std::string(5000, 'e') + "\r\n", 400, "bad_framing", "an endless chunk extension");
}

TEST(RequestParser, MalformedHeadsAreRefused) {
  expect_refused("GET / HTTP/1.1\r\nHost : x\r\n\r\n", 400, "bad_request", "space before the colon");
  expect_refused("GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", 400, "bad_request", "obs-fold");
  expect_refused("GET / HTTP/1.1\nHost: x\n\n", 400, "bad_request", "bare LF lines");
  expect_refused("GET / HTTP/1.1\r\nX: a\x01" "b\r\n\r\n", 400, "bad_request", "a control byte in a value");
  expect_refused("GET / HTTP/1.1\r\nX: a\rb\r\n\r\n", 400, "bad_request", "a bare CR in a value");
  expect_refused("GET  / HTTP/1.1\r\n\r\n", 400, "bad_request", "two spaces in the request line");
  expect_refused("GET / HTTP/2.0\r\n\r\n", 505, "bad_version", "HTTP/2.0 in an HTTP/1 head");
  expect_refused("GET / FTP/1.1\r\n\r\n", 400, "bad_request", "not HTTP");
  expect_refused("GE(T / HTTP/1.1\r\n\r\n", 400, "bad_request", "a method that is not a token");
  expect_refused("GET nothing HTTP/1.1\r\n\r\n", 400, "bad_request", "a target without a slash");
  expect_refused("GET /a%zz HTTP/1.1\r\n\r\n", 400, "bad_request", "a bad percent escape");
  expect_refused("GET /a%00b HTTP/1.1\r\n\r\n", 400, "bad_request", "a NUL in the path");
  expect_refused("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, "bad_request", "two Host headers");
  expect_refused(kPost + "Expect: something\r\nContent-Length: 1\r\n\r\nx", 417, "bad_expect", "an unknown Expect");
}

TEST(RequestParser, TheHeadsLimitsAre431) {
  ParseLimits small;
  small.max_head_bytes = 1024;
  small.max_headers = 10;
  std::string many = "GET / HTTP/1.1\r\n";
  for (int i = 0; i < 11; ++i) many += "X-" + std::to_string(i) + ": v\r\n";
  Parsed p = parse(many + "\r\n", 0, small);
  EXPECT_EQ(p.status, 431);
  EXPECT_EQ(p.reason, "too_many_headers");
  // A head over the limit is refused as soon as the limit is passed, before its end arrives.
  p = parse("GET / HTTP/1.1\r\nX: " + std::string(2000, 'a'), 1, small);
  EXPECT_EQ(p.status, 431);
  EXPECT_EQ(p.reason, "header_too_large");
  // Trailers count against the head's limits too.
  std::string trailers = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n";
  for (int i = 0; i < 11; ++i) trailers += "T-" + std::to_string(i) + ": v\r\n";
  p = parse(trailers + "\r\n", 0, small);
  EXPECT_EQ(p.status, 431);
}

TEST(RequestParser, TargetsQueriesAndKeepAlive) {
  Parsed p = parse("GET /v1/models/a%2Fb?instance=I&since=5&x=a+b HTTP/1.1\r\n\r\n");
  ASSERT_EQ(p.state, State::kComplete);
  EXPECT_EQ(p.request.path, "/v1/models/a/b");
  EXPECT_EQ(p.request.get_param_value("since"), "5");
  EXPECT_EQ(p.request.get_param_value("x"), "a b");
  EXPECT_FALSE(p.request.has_param("y"));
  p = parse("GET http://example.com:8080/health?x=1 HTTP/1.1\r\n\r\n");
  ASSERT_EQ(p.state, State::kComplete);
  EXPECT_EQ(p.request.path, "/health");
  EXPECT_EQ(p.request.query, "x=1");
  RequestParser keep;
  std::string in = "GET / HTTP/1.1\r\n\r\n";
  ASSERT_EQ(keep.feed(in), State::kHeadDone);
  EXPECT_TRUE(keep.keep_alive());
  RequestParser close;
  in = "GET / HTTP/1.1\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(close.feed(in), State::kHeadDone);
  EXPECT_FALSE(close.keep_alive());
  RequestParser old;
  in = "GET / HTTP/1.0\r\n\r\n";
  ASSERT_EQ(old.feed(in), State::kHeadDone);
  EXPECT_FALSE(old.keep_alive()) << "HTTP/1.0 closes unless it asks to keep alive";
}

TEST(RequestParser, ExpectContinueIsReportedBeforeTheBody) {
  RequestParser p;
  std::string in = kPost + "Expect: 100-continue\r\nContent-Length: 5\r\n\r\n";
  ASSERT_EQ(p.feed(in), State::kHeadDone);
  EXPECT_TRUE(p.expects_continue());
  EXPECT_EQ(p.body_remaining(), 5);
  in = "hello";
  EXPECT_EQ(p.feed(in), State::kComplete);
  EXPECT_EQ(p.request().body, "hello");
}

TEST(RequestParser, EmptyLinesBeforeARequestAreSkipped) {
  const Parsed p = parse("\r\n\r\nGET /health HTTP/1.1\r\n\r\n", 1);
  ASSERT_EQ(p.state, State::kComplete) << p.message;
  EXPECT_EQ(p.request.path, "/health");
}

TEST(RequestParser, AHeadSentAByteAtATimeIsParsedInLinearTime) {
  // 60 KB of headers a byte at a time: a rescan per byte would be 1.8e9
  // steps (minutes); the parser resumes where it stopped (well under a
  // second). ctest's timeout catches the regression.
  std::string head = "GET / HTTP/1.1\r\n";
  while (head.size() < 60000) head += "X-Filler: " + std::string(100, 'a') + "\r\n";
  ParseLimits limits;
  limits.max_headers = 1000;
  const Parsed p = parse(head + "\r\n", 1, limits);
  EXPECT_EQ(p.state, State::kComplete) << p.message;
}

}  // namespace
}  // namespace kvlm::http
