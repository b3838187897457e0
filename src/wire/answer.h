// A generated answer as every front end of the server receives it, whole or
// in pieces (server/choice_decoder.h makes them): the thinking, the
// content, the tool calls, and how it ended. Plain data, so the wire
// formats (openai/, anthropic/) turn it into their own JSON without the
// engine.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "chat/tool_call_stream.h"

namespace kvlm {

// What may be sent after a piece of output.
struct ChoiceDelta {
  std::string reasoning;
  std::string content;
  std::vector<ToolCallDelta> calls;  // a call's first piece carries its name (its id: the answer's calls[index])
  bool empty() const { return reasoning.empty() && content.empty() && calls.empty(); }
};

struct AnsweredCall {
  std::string id;  // "call_" + 24 hex (Mistral: 9 letters and digits)
  std::string name;
  std::string arguments;  // compact JSON text (a cut call's: as far as it got)
};

// A choice's answer: in full after its end, so far while it streams.
struct ChoiceAnswer {
  std::string reasoning;  // empty without thinking (or without separation)
  std::string content;    // all of the content, in order
  std::vector<AnsweredCall> calls;
};

// How an answer ended, for the APIs that say it in their own words.
struct AnswerEnd {
  enum class Reason { kStop, kLength, kToolCalls };
  Reason reason = Reason::kStop;
  std::string stop_string;  // the stop string that ended it ("": an end token, a grammar, or none)
};

// Token counts of an answer.
struct AnswerUsage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;  // thinking included
  int32_t cached_tokens = 0;      // prompt tokens the prefix cache (or a KV tier) served
  int32_t reasoning_tokens = 0;   // of completion_tokens: the thinking's (its text tokenized again)
};

}  // namespace kvlm
