// Structured output fields of a request -> a compiled constraint
// (src/constrain/): OpenAI's response_format ({"type": "text"},
// {"type": "json_object"}, {"type": "json_schema", "json_schema": {"name",
// "schema", "strict"}}) and vLLM's guided_json, guided_regex, guided_choice.
// At most one of them may constrain a request.
#pragma once

#include <memory>

#include "server/openai/protocol.h"

namespace kvlm::openai {

// nullptr: the request is unconstrained. A bad field (wrong type, a schema
// or pattern the compiler refuses) throws FieldError naming the field, with
// the compiler's message (keyword and place in the schema). For code inside
// validated() (fields.h).
std::shared_ptr<const constrain::Program> parse_constraint(const Json& body);

}  // namespace kvlm::openai
