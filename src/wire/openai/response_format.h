// Structured output fields of a request: OpenAI's response_format
// ({"type": "text"}, {"type": "json_object"}, {"type": "json_schema",
// "json_schema": {"name", "schema", "strict"}}) and vLLM's guided_json,
// guided_regex, guided_choice, read into a ConstraintSpec (protocol.h) and
// compiled apart from the reading (src/constrain/). At most one of them may
// constrain a request. Internal to wire/openai/.
#pragma once

#include <memory>
#include <optional>

#include "wire/openai/protocol.h"

namespace kvlm::openai {

// nullopt: the request is unconstrained. A field of the wrong shape throws
// FieldError naming it (code inside validated(), fields.h). Compiles nothing.
std::optional<ConstraintSpec> parse_constraint(const Json& body);

// The grammar of `spec`. A schema or pattern the compiler refuses throws
// FieldError naming spec.param, with the compiler's message (keyword and
// place in the schema). With `grammars` (the server's) it is compiled
// within their budget and cached under its canonical text, and a refusal
// for the server's memory or time is a constrain::GrammarLimitError the
// route answers; without, it is compiled as it is.
std::shared_ptr<const constrain::Program> compile_constraint(const ConstraintSpec& spec,
                                                             constrain::GrammarCache* grammars = nullptr);

}  // namespace kvlm::openai
