// Tool calling in /v1/chat/completions, between the protocol (validated
// tools and tool_choice) and src/chat/ (formats, parsers, the tools prompt).
// Internal to server/.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chat/tool_calls.h"
#include "server/choice_decoder.h"
#include "server/routes.h"
#include "wire/openai/protocol.h"

namespace kvlm {

namespace constrain {
class Program;
class GrammarCache;
}

// tool_choice required or named: a grammar that makes the output exactly
// calls in the template's format, each {name, arguments} with the name one
// of the tools (or the named one) and the arguments valid against its
// `parameters` schema (constrain/json_schema.h); one call, or several when
// parallel_tool_calls and the format allow and no function is named (a named
// tool_choice is one call of it, as OpenAI answers). The pythonic format's
// calls take the schema's properties as keyword arguments, required ones
// first. nullptr for auto and none. Throws
// Error(kInvalidArgument) for a parameters schema the compiler refuses.
// Compiled through `grammars` when given (cached under the tools' canonical
// text), which may refuse it with a constrain::GrammarLimitError.
std::shared_ptr<const constrain::Program> tool_call_constraint(ToolCallFormat f, const openai::ChatRequest& r,
                                                               constrain::GrammarCache* grammars = nullptr);

// A fresh call id: "call_" and 24 hex digits, or for Mistral, whose template
// insists on them, 9 letters and digits.
std::string new_tool_call_id(ToolCallFormat f);
// The `tool_calls` array of a message.
openai::Json tool_calls_json(const std::vector<AnsweredCall>& calls);

}  // namespace kvlm
