// How the Jinja interpreter fails. Every failure reaches the caller as
// kvlm::Error(kInvalidArgument):
//  - syntax errors are thrown by the lexer/parser with "line L, column C";
//  - runtime type errors (adding a string to a number, calling an undefined
//    name) are thrown deep inside values and builtins, which do not know
//    where in the template they are, as RuntimeError; the renderer catches
//    them and adds the line of the construct it was evaluating;
//  - raise_exception(msg) throws kvlm::Error with exactly the template's
//    message, so callers can show it verbatim (e.g. "System role not supported").
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace kvlm::jinja {

// 1-based position in the (newline-normalised) template source; columns count
// code points.
struct SourcePos {
  int line = 1;
  int column = 1;
};

class RuntimeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <typename... Args>
[[noreturn]] void throw_runtime(fmt::format_string<Args...> f, Args&&... args) {
  throw RuntimeError(fmt::format(f, std::forward<Args>(args)...));
}

// Throws Error(kInvalidArgument) "template syntax error at line L, column C: message".
[[noreturn]] void throw_syntax(SourcePos pos, std::string_view message);

}  // namespace kvlm::jinja
