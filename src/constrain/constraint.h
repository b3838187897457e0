// The front door of src/constrain/: compiled constraints ready for a
// request. A request holds a shared_ptr<const Program> (immutable, shared by
// its choices and by every request with the same constraint); the engine
// gives each choice its own Matcher over it.
//
// Every function throws Error(kInvalidArgument) with a message naming the
// problem (the schema keyword and its place, the regex offset).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "constrain/grammar.h"
#include "constrain/json_schema.h"
#include "constrain/program.h"

namespace kvlm::constrain {

// Output that is one document valid against `schema` (json_schema.h; in
// kLenient mode, against what of it the grammar can enforce).
std::shared_ptr<const Program> json_schema_program(const Json& schema, SchemaMode mode = SchemaMode::kStrict);
// Output that is one JSON object (OpenAI's {"type": "json_object"}).
std::shared_ptr<const Program> json_object_program();
// Output that matches `pattern` in full (regex.h).
std::shared_ptr<const Program> regex_program(std::string_view pattern);
// Output that is exactly one of `choices` (at least one).
std::shared_ptr<const Program> choice_program(const std::vector<std::string>& choices);
// A grammar built with the composition API (grammar.h).
std::shared_ptr<const Program> grammar_program(const Grammar& grammar);

}  // namespace kvlm::constrain
