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
// or pattern the compiler refuses, a grammar too large) throws FieldError
// naming the field, with the compiler's message (keyword and place in the
// schema). For code inside validated() (fields.h). With `grammars` (the
// server's), the grammar is compiled within their budget and cached under
// its canonical text, and a refusal for the server's memory or time is a
// constrain::GrammarLimitError the route answers; without, it is compiled
// as it is.
std::shared_ptr<const constrain::Program> parse_constraint(const Json& body, constrain::GrammarCache* grammars = nullptr);

}  // namespace kvlm::openai
