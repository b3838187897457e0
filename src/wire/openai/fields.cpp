#include "wire/openai/fields.h"

#include <cmath>

#include <fmt/format.h>

namespace kvlm::openai {

void invalid_field(const std::string& param, const std::string& message, std::optional<std::string> code) {
  RequestError e{400, message, param};
  e.code = std::move(code);
  throw FieldError{std::move(e)};
}

namespace {
[[noreturn]] void wrong_type(const char* key, const std::string& message) { invalid_field(key, message, "invalid_type"); }
[[noreturn]] void wrong_value(const char* key, const std::string& message) { invalid_field(key, message, "invalid_value"); }
}  // namespace

const Json* field(const Json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

std::optional<double> number_field(const Json& obj, const char* key, double lo, double hi) {
  const Json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) wrong_type(key, fmt::format("'{}' must be a number", key));
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    wrong_value(key, fmt::format("'{}' must be between {} and {}, got {}", key, lo, hi, x));
  return x;
}

namespace {
// JSON integers arrive as int64 or uint64; one above INT64_MAX is out of every range we accept.
int64_t clamped_integer(const Json& v) {
  return v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX
                                                                                        : v.get<int64_t>();
}
}  // namespace

std::optional<int64_t> integer_field(const Json& obj, const char* key, int64_t lo, int64_t hi) {
  const Json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) wrong_type(key, fmt::format("'{}' must be an integer", key));
  const int64_t x = clamped_integer(*v);
  if (x < lo || x > hi) wrong_value(key, fmt::format("'{}' must be between {} and {}, got {}", key, lo, hi, x));
  return x;
}

std::optional<bool> bool_field(const Json& obj, const char* key) {
  const Json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) wrong_type(key, fmt::format("'{}' must be true or false", key));
  return v->get<bool>();
}

std::optional<std::string> string_field(const Json& obj, const char* key) {
  const Json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) wrong_type(key, fmt::format("'{}' must be a string", key));
  return v->get<std::string>();
}

int64_t integer_item(const Json& item, const std::string& param, int64_t lo, int64_t hi) {
  if (!item.is_number_integer() || clamped_integer(item) < lo || clamped_integer(item) > hi)
    invalid_field(param, fmt::format("'{}' must hold integers in [{}, {}]", param, lo, hi));
  return clamped_integer(item);
}

}  // namespace kvlm::openai
