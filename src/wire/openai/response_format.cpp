#include "server/openai/response_format.h"

#include <fmt/format.h>

#include "common/error.h"
#include "constrain/constraint.h"
#include "constrain/grammar_cache.h"
#include "server/openai/fields.h"
#include "server/openai/json_text.h"

namespace kvlm::openai {
namespace {

// Runs a compiler, through the server's grammars when given (cached under
// `key`, the canonical text of what it compiles, and within their budget).
// Its Error becomes a 400 on `param`, except a refusal for the server's
// memory or time, which the route answers (503).
template <typename F>
std::shared_ptr<const constrain::Program> compiled(const std::string& param, constrain::GrammarCache* grammars,
                                                   const std::string& key, F&& f) {
  try {
    return grammars ? grammars->get(key, f) : f();
  } catch (const constrain::GrammarLimitError& e) {
    if (e.limit() != constrain::GrammarLimit::kTooLarge) throw;
    invalid_field(param, fmt::format("'{}': {}", param, e.what()));
  } catch (const Error& e) {
    invalid_field(param, fmt::format("'{}': {}", param, e.what()));
  }
}

// strict: true refuses what the grammar cannot enforce; otherwise it is
// left unenforced (constrain/json_schema.h), as OpenAI's non-strict mode
// promises nothing beyond its best effort.
std::shared_ptr<const constrain::Program> schema_program(const Json& schema, const std::string& param,
                                                         constrain::SchemaMode mode, constrain::GrammarCache* grammars) {
  if (!schema.is_object() && !schema.is_boolean()) invalid_field(param, fmt::format("'{}' must be a JSON Schema object", param));
  const std::string key = grammars ? fmt::format("json_schema {}\n{}", mode == constrain::SchemaMode::kStrict ? "strict" : "lenient",
                                                 constrain::canonical_schema_text(schema))
                                   : std::string();
  return compiled(param, grammars, key, [&] { return constrain::json_schema_program(schema, mode); });
}

std::shared_ptr<const constrain::Program> json_object(constrain::GrammarCache* grammars) {
  return compiled("response_format", grammars, "json_object", [] { return constrain::json_object_program(); });
}

std::shared_ptr<const constrain::Program> response_format(const Json& rf, constrain::GrammarCache* grammars) {
  if (!rf.is_object()) invalid_field("response_format", "'response_format' must be an object");
  const Json* type = field(rf, "type");
  if (!type || !type->is_string())
    invalid_field("response_format.type", "'response_format.type' must be one of: text, json_object, json_schema");
  const std::string t = type->get<std::string>();
  if (t == "text") return nullptr;
  if (t == "json_object") return json_object(grammars);
  if (t != "json_schema")
    invalid_field("response_format.type",
                  fmt::format("'response_format.type' must be one of: text, json_object, json_schema, got '{}'", t));
  const Json* js = field(rf, "json_schema");
  if (!js || !js->is_object())
    invalid_field("response_format.json_schema", "'response_format.json_schema' must be an object with a 'schema'");
  if (const Json* name = field(*js, "name"); name && !name->is_string())
    invalid_field("response_format.json_schema.name", "'response_format.json_schema.name' must be a string");
  const Json* strict = field(*js, "strict");
  if (strict && !strict->is_boolean())
    invalid_field("response_format.json_schema.strict", "'response_format.json_schema.strict' must be true or false");
  const Json* schema = field(*js, "schema");
  if (!schema) return json_object(grammars);  // OpenAI: no schema, any JSON object
  return schema_program(*schema, "response_format.json_schema.schema",
                        strict && strict->get<bool>() ? constrain::SchemaMode::kStrict : constrain::SchemaMode::kLenient,
                        grammars);
}

}  // namespace

std::shared_ptr<const constrain::Program> parse_constraint(const Json& body, constrain::GrammarCache* grammars) {
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
    auto p = response_format(*rf, grammars);
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
      return schema_program(parsed, "guided_json", constrain::SchemaMode::kLenient, grammars);
    }
    return schema_program(*j, "guided_json", constrain::SchemaMode::kLenient, grammars);
  }
  if (const Json* r = field(body, "guided_regex")) {
    if (!r->is_string()) invalid_field("guided_regex", "'guided_regex' must be a string");
    const std::string& pattern = r->get_ref<const std::string&>();
    return compiled("guided_regex", grammars, "regex\n" + pattern, [&] { return constrain::regex_program(pattern); });
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
    return compiled("guided_choice", grammars, "choice\n" + c->dump(), [&] { return constrain::choice_program(choices); });
  }
  return nullptr;
}

}  // namespace kvlm::openai
