// One reader per JSON field type, used by every route, so a wrong type or a
// value out of range is always a 400 that names the field:
//   {"error": {"message": "'temperature' must be between 0 and 2, got 9", "param": "temperature", ...}}
// Each reader returns nullopt for an absent or null field. On a bad value it
// throws FieldError, which only `validated` catches: the readers are for code
// that runs inside validated(...).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>

#include "wire/openai/protocol.h"

namespace kvlm::openai {

// The failure the readers throw; it never leaves validated().
struct FieldError {
  RequestError error;
};

// A 400 on `param`; `code` as OpenAI spells it (docs/server.md "Error
// codes"): the readers below say invalid_type or invalid_value.
[[noreturn]] void invalid_field(const std::string& param, const std::string& message,
                                std::optional<std::string> code = std::nullopt);

// The field's value, or nullptr when it is absent or JSON null.
const Json* field(const Json& obj, const char* key);

std::optional<double> number_field(const Json& obj, const char* key, double lo, double hi);
std::optional<int64_t> integer_field(const Json& obj, const char* key, int64_t lo, int64_t hi);
std::optional<bool> bool_field(const Json& obj, const char* key);
std::optional<std::string> string_field(const Json& obj, const char* key);
// A JSON integer in [lo, hi] as an element of a list named `param` ("tokens",
// "prompt"): a float, a string or an integer out of range is a FieldError.
int64_t integer_item(const Json& item, const std::string& param, int64_t lo, int64_t hi);

// Runs f() and turns a FieldError into the RequestError it carries.
template <typename T, typename F>
std::variant<T, RequestError> validated(F&& f) {
  try {
    return f();
  } catch (const FieldError& e) {
    return e.error;
  }
}

}  // namespace kvlm::openai
