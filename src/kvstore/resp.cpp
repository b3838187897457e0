#include "kvstore/resp.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

namespace kvlm {
namespace {

bool parse_int(std::string_view s, int64_t* v) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  return !s.empty() && ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

std::string encode_command(const RedisCommand& argv) {
  size_t n = 16;
  for (const auto& a : argv) n += a.size() + 16;
  std::string out;
  out.reserve(n);
  out += fmt::format("*{}\r\n", argv.size());
  for (const auto& a : argv) {
    out += fmt::format("${}\r\n", a.size());
    out += a;
    out += "\r\n";
  }
  return out;
}

RespParser::Result RespParser::fail(Result r, std::string why) {
  failed_ = r;
  error_ = std::move(why);
  return r;
}

void RespParser::reset() {
  buf_.clear();
  if (buf_.capacity() > (1u << 20)) std::string().swap(buf_);  // a large reply's buffer is not kept
  pos_ = scanned_ = num_elements_ = 0;
  stack_.clear();
  failed_ = Result::kReply;
  error_.clear();
}

void RespParser::compact() {
  if (pos_ == buf_.size()) {
    const bool big = buf_.capacity() > (1u << 20);
    buf_.clear();
    if (big) std::string().swap(buf_);
    pos_ = 0;
  } else if (pos_ > (64u << 10)) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
}

RespParser::Result RespParser::token(RedisReply* value, bool* opened_array) {
  *opened_array = false;
  const size_t eol = buf_.find("\r\n", pos_ + std::max<size_t>(1, scanned_));
  if (eol == std::string::npos) {
    if (buf_.size() - pos_ > limits_.max_line_bytes) return fail(Result::kOversize, "a reply line past the limit");
    scanned_ = buf_.size() - pos_ - 1;  // its last byte may be the '\r' of a line end
    return Result::kNeedMore;
  }
  if (eol - pos_ > limits_.max_line_bytes) return fail(Result::kOversize, "a reply line past the limit");
  const std::string_view line(buf_.data() + pos_ + 1, eol - pos_ - 1);
  size_t next = eol + 2;
  int64_t n = 0;
  switch (buf_[pos_]) {
    case '+': value->type = RedisReply::Type::kStatus; value->str = line; break;
    case '-': value->type = RedisReply::Type::kError; value->str = line; break;
    case ':':
      if (!parse_int(line, &value->integer)) return fail(Result::kProtocol, "a bad integer reply");
      value->type = RedisReply::Type::kInteger;
      break;
    case '$':
      if (!parse_int(line, &n) || n < -1) return fail(Result::kProtocol, "a bad string length");
      if (n == -1) break;  // nil
      if (static_cast<uint64_t>(n) > limits_.max_bulk_bytes)
        return fail(Result::kOversize, fmt::format("a {}-byte string, past the limit of {}", n, limits_.max_bulk_bytes));
      scanned_ = eol - pos_;  // the header is whole: wait for the data without searching again
      if (buf_.size() < next + static_cast<size_t>(n) + 2) return Result::kNeedMore;
      if (buf_.compare(next + static_cast<size_t>(n), 2, "\r\n") != 0) return fail(Result::kProtocol, "a string without its line end");
      value->type = RedisReply::Type::kString;
      value->str.assign(buf_, next, static_cast<size_t>(n));
      next += static_cast<size_t>(n) + 2;
      break;
    case '*':
      if (!parse_int(line, &n) || n < -1) return fail(Result::kProtocol, "a bad array length");
      if (n == -1) break;  // nil
      if (static_cast<uint64_t>(n) > limits_.max_elements ||
          num_elements_ + static_cast<uint64_t>(n) > limits_.max_total_elements)
        return fail(Result::kOversize, fmt::format("an array of {} elements, past the limit of {}", n, limits_.max_elements));
      value->type = RedisReply::Type::kArray;
      num_elements_ += static_cast<size_t>(n);
      if (n > 0) {
        if (stack_.size() >= limits_.max_depth) return fail(Result::kOversize, "arrays nested past the limit");
        stack_.push_back(Frame{RedisReply{RedisReply::Type::kArray, {}, 0, {}}, static_cast<size_t>(n)});
        stack_.back().array.elements.reserve(std::min<size_t>(static_cast<size_t>(n), 16));
        *opened_array = true;
      }
      break;
    default: return fail(Result::kProtocol, fmt::format("an unknown reply type byte 0x{:02x}", static_cast<uint8_t>(buf_[pos_])));
  }
  pos_ = next;
  scanned_ = 0;
  return Result::kReply;
}

RespParser::Result RespParser::next(RedisReply* out) {
  if (failed_ != Result::kReply) return failed_;
  for (;;) {
    if (pos_ >= buf_.size()) return Result::kNeedMore;
    RedisReply value;
    bool opened = false;
    const Result r = token(&value, &opened);
    if (r != Result::kReply) return r;
    if (opened) continue;
    // A whole value: it completes the arrays it ends, innermost first.
    while (!stack_.empty()) {
      Frame& f = stack_.back();
      f.array.elements.push_back(std::move(value));
      if (--f.remaining > 0) break;
      value = std::move(f.array);
      stack_.pop_back();
      if (stack_.empty()) break;
    }
    if (stack_.empty()) {
      *out = std::move(value);
      num_elements_ = 0;
      compact();
      return Result::kReply;
    }
  }
}

}  // namespace kvlm
