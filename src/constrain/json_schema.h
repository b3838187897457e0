// JSON Schema -> grammar. The output is compact JSON (no whitespace),
// properties in the order the schema lists them, so that what the grammar
// allows is always valid against the schema (it allows a subset of the valid
// documents, never more).
//
// Supported: type (a name or a list), properties, required,
// additionalProperties (false, or absent beside `properties`: no other keys;
// absent without `properties`: any keys; true or a schema: other keys after
// the listed ones, spelled longer than every listed name so they
// can never repeat one), items (a schema or false), prefixItems, minItems,
// maxItems, enum, const, anyOf, oneOf (its branches should not overlap: the
// grammar does not check exclusivity), allOf with one schema, $ref to
// "#", "#/$defs/..." or "#/definitions/..." (recursion allowed), string
// pattern (regex.h), minLength, maxLength, format date / time / date-time /
// uuid (other formats are annotations and change nothing), integer and number
// with minimum, maximum, exclusiveMinimum, exclusiveMaximum, boolean, null,
// nullable (OpenAPI), minProperties and maxProperties. Annotations (title,
// description, default, examples, $schema, $id, $comment, deprecated,
// readOnly, writeOnly, contentMediaType, contentEncoding, contentSchema) are
// ignored.
//
// What the grammar cannot enforce depends on the mode. kStrict refuses it,
// naming the keyword and where it is (OpenAI's strict: true promises a
// valid document). kLenient (strict: false, OpenAI's default) compiles the
// rest and ignores it, so the output may break exactly those keywords: any
// other keyword (not, if/then/else, uniqueItems, multipleOf,
// patternProperties, propertyNames, dependentRequired, contains, ...),
// minLength/maxLength beside a pattern (the pattern wins), and allOf with
// several schemas (merged: properties and required joined, the first
// schema's other keywords win).
//
// Limits that keep generation finite: integers have at most 15 digits,
// fractions at most 6 digits; strings and arrays without maxLength/maxItems
// are unbounded. A string with maxLength holds no character past U+FFFF, so
// validators that count UTF-16 units (zod, JavaScript) agree on its length.
#pragma once

#include <nlohmann/json.hpp>

#include "constrain/grammar.h"

namespace kvlm::constrain {

using Json = nlohmann::ordered_json;

enum class SchemaMode { kStrict, kLenient };

// Adds the schema's rules to `g` and returns the expression of one document.
// Throws Error(kInvalidArgument) "json_schema: <what> at <#/json/pointer>".
Expr json_schema_expr(Grammar& g, const Json& schema, SchemaMode mode = SchemaMode::kStrict);
// Any JSON value; any JSON object (OpenAI's json_object mode).
Expr any_json_value_expr(Grammar& g);
Expr any_json_object_expr(Grammar& g);
// The schema's canonical text, the key of a cache of compiled grammars:
// compact JSON with each schema object's keywords sorted (they mean the same
// in any order), while what depends on order keeps it (properties, which the
// output spells in schema order; anyOf and the other lists; enum and const
// values). Equal texts compile to the same grammar.
std::string canonical_schema_text(const Json& schema);
// One JSON string (quotes included) of length [min, max] characters (with a
// max, characters up to U+FFFF only).
Expr json_string_expr(int32_t min_length, std::optional<int32_t> max_length);

}  // namespace kvlm::constrain
