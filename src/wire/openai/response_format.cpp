#include "wire/openai/response_format.h"

#include <fmt/format.h>

#include "common/error.h"
#include "constrain/constraint.h"
#include "constrain/grammar_cache.h"
#include "wire/openai/fields.h"
#include "wire/openai/json_text.h"
#include "wire/openai/tools.h"

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

ConstraintSpec schema_spec(const Json& schema, std::string param, bool strict) {
  if (!schema.is_object() && !schema.is_boolean()) invalid_field(param, fmt::format("'{}' must be a JSON Schema object", param));
  ConstraintSpec spec;
  spec.kind = ConstraintSpec::Kind::kJsonSchema;
  spec.param = std::move(param);
  spec.schema = schema;
  spec.strict = strict;
  return spec;
}

ConstraintSpec json_object_spec() {
  ConstraintSpec spec;
  spec.param = "response_format";
  return spec;
}

std::optional<ConstraintSpec> response_format(const Json& rf) {
  if (!rf.is_object()) invalid_field("response_format", "'response_format' must be an object");
  const Json* type = field(rf, "type");
  if (!type || !type->is_string())
    invalid_field("response_format.type", "'response_format.type' must be one of: text, json_object, json_schema");
  const std::string t = type->get<std::string>();
  if (t == "text") return std::nullopt;
  if (t == "json_object") return json_object_spec();
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
  if (!schema) return json_object_spec();  // OpenAI: no schema, any JSON object
  return schema_spec(*schema, "response_format.json_schema.schema", strict && strict->get<bool>());
}

ConstraintSpec guided_json(const Json& j) {
  if (!j.is_string()) return schema_spec(j, "guided_json", false);
  Json parsed;
  try {
    parsed = parse_json(j.get<std::string>());
  } catch (const Error& e) {
    invalid_field("guided_json", fmt::format("'guided_json' must be a JSON Schema (an object or its JSON text): {}", e.what()));
  }
  return schema_spec(parsed, "guided_json", false);
}

ConstraintSpec guided_choice(const Json& c) {
  if (!c.is_array() || c.empty()) invalid_field("guided_choice", "'guided_choice' must be a non-empty array of strings");
  ConstraintSpec spec;
  spec.kind = ConstraintSpec::Kind::kChoice;
  spec.param = "guided_choice";
  for (const Json& x : c) {
    if (!x.is_string() || x.get<std::string>().empty())
      invalid_field("guided_choice", "'guided_choice' must be a non-empty array of non-empty strings");
    spec.choices.push_back(x.get<std::string>());
  }
  return spec;
}

}  // namespace

std::optional<ConstraintSpec> parse_constraint(const Json& body) {
  const char* given = nullptr;
  for (const char* key : {"response_format", "guided_json", "guided_regex", "guided_choice"}) {
    const Json* v = field(body, key);
    if (!v) continue;
    // {"type": "text"} constrains nothing and may come with a guided_* field.
    if (std::string(key) == "response_format" && v->is_object() && v->value("type", "") == "text") continue;
    if (given) invalid_field(key, fmt::format("'{}' and '{}' cannot be used together", given, key));
    given = key;
  }
  if (const Json* rf = field(body, "response_format"))
    if (auto spec = response_format(*rf)) return spec;
  if (const Json* j = field(body, "guided_json")) return guided_json(*j);
  if (const Json* r = field(body, "guided_regex")) {
    if (!r->is_string()) invalid_field("guided_regex", "'guided_regex' must be a string");
    ConstraintSpec spec;
    spec.kind = ConstraintSpec::Kind::kRegex;
    spec.param = "guided_regex";
    spec.pattern = r->get<std::string>();
    return spec;
  }
  if (const Json* c = field(body, "guided_choice")) return guided_choice(*c);
  return std::nullopt;
}

std::shared_ptr<const constrain::Program> compile_constraint(const ConstraintSpec& spec, constrain::GrammarCache* grammars) {
  using Kind = ConstraintSpec::Kind;
  switch (spec.kind) {
    case Kind::kJsonObject:
      return compiled(spec.param, grammars, "json_object", [] { return constrain::json_object_program(); });
    case Kind::kJsonSchema: {
      const auto mode = spec.strict ? constrain::SchemaMode::kStrict : constrain::SchemaMode::kLenient;
      // The key is the schema's canonical text: only a cache needs it.
      const std::string key = grammars ? fmt::format("json_schema {}\n{}", spec.strict ? "strict" : "lenient",
                                                     constrain::canonical_schema_text(spec.schema))
                                       : std::string();
      return compiled(spec.param, grammars, key, [&] { return constrain::json_schema_program(spec.schema, mode); });
    }
    case Kind::kRegex:
      return compiled(spec.param, grammars, "regex\n" + spec.pattern, [&] { return constrain::regex_program(spec.pattern); });
    case Kind::kChoice:
      return compiled(spec.param, grammars, "choice\n" + Json(spec.choices).dump(),
                      [&] { return constrain::choice_program(spec.choices); });
  }
  return nullptr;
}

namespace {

// Runs `compile` and returns the RequestError a FieldError carried.
template <typename F>
std::optional<RequestError> refusal_of(F&& compile) {
  auto v = validated<bool>([&] {
    compile();
    return true;
  });
  if (auto* e = std::get_if<RequestError>(&v)) return std::move(*e);
  return std::nullopt;
}

}  // namespace

std::optional<RequestError> compile_grammars(CompletionRequest& r, constrain::GrammarCache* grammars) {
  return refusal_of([&] {
    if (r.options.constraint_spec) r.options.constraint = compile_constraint(*r.options.constraint_spec, grammars);
  });
}

std::optional<RequestError> compile_grammars(ChatRequest& r, constrain::GrammarCache* grammars) {
  return refusal_of([&] {
    if (r.options.constraint_spec) r.options.constraint = compile_constraint(*r.options.constraint_spec, grammars);
    check_strict_tools(r, grammars);
  });
}

}  // namespace kvlm::openai
