// RESP2, the Redis protocol, for the tier's own client (redis_link.h):
// commands out, replies in through a parser that bounds what it holds.
//
// Why not hiredis's reader: it accepts any length a server announces, so a
// reply header of `*2147483647` or `$1500000000` makes it reserve that much
// before a byte of it arrives. RespParser checks every length against
// ReplyLimits when it reads the header and refuses it there (kOversize),
// having allocated nothing for it; the caller drops the connection. The
// parser is incremental: bytes are fed as they arrive (one at a time is
// fine) and each byte is examined a bounded number of times.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvlm {

// A reply, binary-safe.
struct RedisReply {
  enum class Type { kNil, kString, kInteger, kStatus, kError, kArray };
  Type type = Type::kNil;
  std::string str;                  // kString, kStatus, kError
  int64_t integer = 0;              // kInteger
  std::vector<RedisReply> elements; // kArray
  bool is_error() const { return type == Type::kError; }
};

using RedisCommand = std::vector<std::string>;  // argv, binary-safe

// `*N\r\n` then `$len\r\narg\r\n` per argument.
std::string encode_command(const RedisCommand& argv);

// What one reply may hold. The defaults are generous bounds for any
// command; the tier narrows them per call (RedisStore: a GET's string is at
// most the largest legal record, and no arrays).
struct ReplyLimits {
  size_t max_bulk_bytes = 64u << 20;      // one string
  size_t max_elements = 1u << 20;         // one array
  size_t max_total_elements = 1u << 20;   // every array of one reply together
  size_t max_depth = 8;                   // arrays in arrays
  size_t max_line_bytes = 64u << 10;      // status, error and integer lines, headers
};

class RespParser {
 public:
  enum class Result { kReply, kNeedMore, kProtocol, kOversize };

  explicit RespParser(ReplyLimits limits = {}) : limits_(limits) {}
  void set_limits(const ReplyLimits& limits) { limits_ = limits; }
  void feed(const char* data, size_t n) { buf_.append(data, n); }
  // The next whole reply into *out (kReply), or kNeedMore. kProtocol and
  // kOversize are final: the stream is out of step; reset() before reuse.
  Result next(RedisReply* out);
  void reset();
  // Bytes fed and not yet consumed by a whole reply.
  size_t num_buffered() const { return buf_.size() - pos_; }
  const std::string& error() const { return error_; }

 private:
  struct Frame {
    RedisReply array;
    size_t remaining;
  };
  // Parses the token at pos_ into *value; kReply when it is a whole value,
  // kNeedMore (nothing consumed), an error, or (an array header) pushes a
  // frame and returns kNeedMore with the header consumed — see next().
  Result token(RedisReply* value, bool* opened_array);
  Result fail(Result r, std::string why);
  void compact();

  ReplyLimits limits_;
  std::string buf_;
  size_t pos_ = 0;        // start of the token being parsed
  size_t scanned_ = 0;    // bytes after pos_ known to hold no line end
  size_t num_elements_ = 0;
  std::vector<Frame> stack_;
  Result failed_ = Result::kReply;  // kProtocol or kOversize once the stream is out of step
  std::string error_;
};

}  // namespace kvlm
