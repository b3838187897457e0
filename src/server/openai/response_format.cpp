#include "server/openai/response_format.h"

#include <fmt/format.h>

#include "common/error.h"
#include "constrain/constraint.h"
#include "server/openai/fields.h"
#include "server/openai/json_text.h"

namespace kvlm::openai {
namespace {

// Runs a compiler; its Error becomes a 400 on `param`.
template <typename F>
std::shared_ptr<const constrain::Program> compiled(const std::string& param, F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    invalid_field(param, fmt::format("'{}': {}", param, e.what()));
  }
}

std::shared_ptr<const constrain::Program> schema_program(const Json& schema, const std::string& param) {
  if (!schema.is_object() && !schema.is_boolean()) invalid_field(param, fmt::format("'{}' must be a JSON Schema object", param));
  return compiled(param, [&] { return constrain::json_schema_program(schema); });
}

std::shared_ptr<const constrain::Program> response_format(const Json& rf) {
  if (!rf.is_object()) invalid_field("response_format", "'response_format' must be an object");
  const Json* type = field(rf, "type");
  if (!type || !type->is_string())
    invalid_field("response_format.type", "'response_format.type' must be one of: text, json_object, json_schema");
  const std::string t = type->get<std::string>();
  if (t == "text") return nullptr;
  if (t == "json_object") return constrain::json_object_program();
  if (t != "json_schema")
    invalid_field("response_format.type",
                  fmt::format("'response_format.type' must be one of: text, json_object, json_schema, got '{}'", t));
  const Json* js = field(rf, "json_schema");
  if (!js || !js->is_object())
    invalid_field("response_format.json_schema", "'response_format.json_schema' must be an object with a 'schema'");
  if (const Json* name = field(*js, "name"); name && !name->is_string())
    invalid_field("response_format.json_schema.name", "'response_format.json_schema.name' must be a string");
  const Json* schema = field(*js, "schema");
  if (!schema) return constrain::json_object_program();  // OpenAI: no schema, any JSON object
  return schema_program(*schema, "response_format.json_schema.schema");
}

}  // namespace

std::shared_ptr<const constrain::Program> parse_constraint(const Json& body) {
  const char* given = nullptr;
  for (const char* key : {"response_format", "guided_json", "guided_regex", "guided_choice"}) {
    const Json* v = field(body, key);
    if (!v) continue;
    // {"type": "text"} constrains nothing and may come with a guided_* field.
    if (std::string(key) == "response_format" && v->is_object() && v->value("type", "") == "text") continue;
    if (given) invalid_field(key, fmt::format("'{}' and '{}' cannot be used together", given, key));
    given = key;
  }
  if (const Json* rf = field(body, "response_format")) {
    auto p = response_format(*rf);
    if (p) return p;
  }
  if (const Json* j = field(body, "guided_json")) {
    if (j->is_string()) {
      Json parsed;
      try {
        parsed = parse_json(j->get<std::string>());
      } catch (const Error& e) {
        invalid_field("guided_json", fmt::format("'guided_json' must be a JSON Schema (an object or its JSON text): {}", e.what()));
      }
      return schema_program(parsed, "guided_json");
    }
    return schema_program(*j, "guided_json");
  }
  if (const Json* r = field(body, "guided_regex")) {
    if (!r->is_string()) invalid_field("guided_regex", "'guided_regex' must be a string");
    return compiled("guided_regex", [&] { return constrain::regex_program(r->get<std::string>()); });
  }
  if (const Json* c = field(body, "guided_choice")) {
    if (!c->is_array() || c->empty())
      invalid_field("guided_choice", "'guided_choice' must be a non-empty array of strings");
    std::vector<std::string> choices;
    for (const Json& x : *c) {
      if (!x.is_string() || x.get<std::string>().empty())
        invalid_field("guided_choice", "'guided_choice' must be a non-empty array of non-empty strings");
      choices.push_back(x.get<std::string>());
    }
    return constrain::choice_program(choices);
  }
  return nullptr;
}

}  // namespace kvlm::openai
