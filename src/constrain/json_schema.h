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
// nullable (OpenAPI). Annotations (title, description, default, examples,
// $schema, $id, $comment, deprecated, readOnly, writeOnly) are ignored.
// Anything else is refused, naming the keyword and where it is.
//
// Limits that keep generation finite: integers have at most 15 digits,
// fractions at most 6 digits; strings and arrays without maxLength/maxItems
// are unbounded.
#pragma once

#include <nlohmann/json.hpp>

#include "constrain/grammar.h"

namespace kvlm::constrain {

using Json = nlohmann::ordered_json;

// Adds the schema's rules to `g` and returns the expression of one document.
// Throws Error(kInvalidArgument) "json_schema: <what> at <#/json/pointer>".
Expr json_schema_expr(Grammar& g, const Json& schema);
// Any JSON value; any JSON object (OpenAI's json_object mode).
Expr any_json_value_expr(Grammar& g);
Expr any_json_object_expr(Grammar& g);
// One JSON string (quotes included) of length [min, max] characters.
Expr json_string_expr(int32_t min_length, std::optional<int32_t> max_length);

}  // namespace kvlm::constrain
