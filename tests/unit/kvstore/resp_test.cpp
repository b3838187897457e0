// The RESP parser of the tier's Redis client (kvstore/resp.h): every reply
// type, fed whole or a byte at a time, gives the same replies; a header past
// the limits is refused as soon as its line is read (nothing waits for, or
// allocates, the bytes it announces); malformed input is a protocol error.
#include <gtest/gtest.h>

#include "kvstore/resp.h"

namespace kvlm {
namespace {

using Result = RespParser::Result;

const std::string kStream =
    "+OK\r\n-ERR no\r\n:-42\r\n$5\r\nhe\r\nl\r\n$-1\r\n*-1\r\n*0\r\n"
    "*3\r\n:1\r\n*2\r\n$1\r\na\r\n$0\r\n\r\n+x\r\n";

std::vector<RedisReply> parse_all(const std::string& bytes, size_t piece, Result* last = nullptr) {
  RespParser p;
  std::vector<RedisReply> out;
  Result r = Result::kNeedMore;
  for (size_t at = 0; at < bytes.size(); at += piece) {
    p.feed(bytes.data() + at, std::min(piece, bytes.size() - at));
    RedisReply reply;
    while ((r = p.next(&reply)) == Result::kReply) out.push_back(std::move(reply));
  }
  if (last != nullptr) *last = r;
  return out;
}

TEST(Resp, EncodesCommandsBinarySafe) {
  EXPECT_EQ(encode_command({"SET", std::string("k\0\r\n", 4), ""}), std::string("*3\r\n$3\r\nSET\r\n$4\r\nk\0\r\n\r\n$0\r\n\r\n", 29));
}

TEST(Resp, EveryTypeWholeOrAByteAtATime) {
  for (size_t piece : {kStream.size(), size_t{1}, size_t{3}}) {
    const auto r = parse_all(kStream, piece);
    ASSERT_EQ(r.size(), 8u) << piece;
    EXPECT_EQ(r[0].type, RedisReply::Type::kStatus);
    EXPECT_EQ(r[1].type, RedisReply::Type::kError);
    EXPECT_EQ(r[1].str, "ERR no");
    EXPECT_EQ(r[2].integer, -42);
    EXPECT_EQ(r[3].str, "he\r\nl");
    EXPECT_EQ(r[4].type, RedisReply::Type::kNil);
    EXPECT_EQ(r[5].type, RedisReply::Type::kNil);
    EXPECT_EQ(r[6].type, RedisReply::Type::kArray);
    EXPECT_TRUE(r[6].elements.empty());
    ASSERT_EQ(r[7].elements.size(), 3u);
    ASSERT_EQ(r[7].elements[1].elements.size(), 2u);
    EXPECT_EQ(r[7].elements[1].elements[0].str, "a");
    EXPECT_EQ(r[7].elements[1].elements[1].str, "");
    EXPECT_EQ(r[7].elements[2].str, "x");
  }
}

TEST(Resp, HeadersPastTheLimitsAreRefusedOnTheirLine) {
  const ReplyLimits limits{.max_bulk_bytes = 100, .max_elements = 4, .max_total_elements = 6, .max_depth = 2,
                           .max_line_bytes = 32};
  auto first = [&](const std::string& bytes) {
    RespParser p(limits);
    p.feed(bytes.data(), bytes.size());
    RedisReply r;
    return p.next(&r);
  };
  EXPECT_EQ(first("$1500000000\r\n"), Result::kOversize);  // no byte of it has come
  EXPECT_EQ(first("*2147483647\r\n"), Result::kOversize);
  EXPECT_EQ(first("$101\r\n"), Result::kOversize);
  EXPECT_EQ(first("$100\r\n"), Result::kNeedMore);
  EXPECT_EQ(first("*5\r\n"), Result::kOversize);
  EXPECT_EQ(first("*4\r\n*4\r\n"), Result::kOversize);  // 8 elements in all
  EXPECT_EQ(first("*1\r\n*1\r\n*1\r\n:1\r\n"), Result::kOversize);  // nested three deep
  EXPECT_EQ(first("+" + std::string(40, 'a')), Result::kOversize);  // a line that never ends
  RespParser p(limits);
  p.feed("$10\r\n0123456789", 15);
  RedisReply r;
  EXPECT_EQ(p.next(&r), Result::kNeedMore);
  EXPECT_EQ(p.num_buffered(), 15u);
  p.feed("\r\n", 2);
  EXPECT_EQ(p.next(&r), Result::kReply);
  EXPECT_EQ(r.str, "0123456789");
  EXPECT_EQ(p.num_buffered(), 0u);
}

TEST(Resp, MalformedInputIsAProtocolErrorThatStays) {
  for (const std::string bad : {"?x\r\n", ":12a\r\n", "$-2\r\n", "$3\r\nabcd\r\n", "*x\r\n", ":\r\n"}) {
    Result last;
    parse_all(bad, 1, &last);
    EXPECT_EQ(last, Result::kProtocol) << bad;
  }
  RespParser p;
  p.feed("?\r\n+OK\r\n", 8);
  RedisReply r;
  EXPECT_EQ(p.next(&r), Result::kProtocol);
  EXPECT_EQ(p.next(&r), Result::kProtocol) << "out of step for good";
  p.reset();
  p.feed("+OK\r\n", 5);
  EXPECT_EQ(p.next(&r), Result::kReply);
}

}  // namespace
}  // namespace kvlm
