// kvlm's one error type. User and environment failures (bad flags, missing
// files, corrupt GGUF, a prompt longer than the context, bad JSON) are thrown
// as kvlm::Error with a code the server maps to an HTTP status and a message a
// user can act on. Expected "not now" outcomes (no free KV block) are return
// values, never errors. Programmer errors are KVLM_ASSERT (common/assert.h).
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace kvlm {

enum class ErrorCode {
  kInvalidArgument,  // bad flag, bad request field, bad JSON     -> HTTP 400
  kNotFound,         // missing file, unknown model or route        -> HTTP 404
  kCorrupt,          // malformed or hostile file contents         -> HTTP 500
  kUnsupported,      // valid input we do not handle (arch, dtype)  -> HTTP 400
  kOutOfRange,       // prompt longer than the context, too many tokens -> HTTP 400
  kUnavailable,      // engine stopped or overloaded                -> HTTP 503
  kCancelled,        // request cancelled by the client
  kInternal,         // a bug surfaced as an error rather than an abort
};

std::string_view error_code_name(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, std::string message)
      : std::runtime_error(std::move(message)), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

// throw_error(ErrorCode::kNotFound, "no such file: {}", path);
template <typename... Args>
[[noreturn]] void throw_error(ErrorCode code, fmt::format_string<Args...> f, Args&&... args) {
  throw Error(code, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace kvlm
