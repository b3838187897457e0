// JSON in and out of the interpreter. Messages arrive as nlohmann's
// ordered_json so object keys keep the order the client sent (templates
// iterate them and `tojson` prints them in that order, as Python dicts do).
// `tojson` output is Python's json.dumps, which is what Hugging Face's
// chat-template `tojson` filter calls.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/jinja/value.h"

namespace kvlm::jinja {

// Throws RuntimeError for a value nested deeper than 128 levels.
Value from_json(const nlohmann::ordered_json& j);

struct JsonDumpOptions {
  bool ensure_ascii = false;          // escape non-ASCII as \uXXXX
  std::optional<std::string> indent;  // nullopt: one line; else the per-level indent string
  std::optional<std::string> item_separator;  // default ", " (or "," when indenting)
  std::optional<std::string> key_separator;   // default ": "
  bool sort_keys = false;
};

// json.dumps(v): throws RuntimeError for values JSON cannot hold (undefined,
// functions, namespaces) and for unsupported key types.
std::string json_dumps(const Value& v, const JsonDumpOptions& options);

}  // namespace kvlm::jinja
