// How a front end other than OpenAI's chat and completions (Anthropic
// Messages, OpenAI Responses) answers a chat generation in its own wire
// format. The server's route makes its request a Generation (the one
// internal request model, so limits, grammars, KV budgets and tiers behave
// the same) with a writer (anthropic/messages.h, responses/responses.h);
// server/routes_front.cpp runs the generation and hands the writer the
// choice's answer, whole or in pieces. One choice (these APIs have no n).
#pragma once

#include <string>

#include "wire/answer.h"
#include "wire/openai/protocol.h"

namespace kvlm {

class AnswerWriter {
 public:
  virtual ~AnswerWriter() = default;
  // The body of a whole answer.
  virtual openai::Json whole(const ChoiceAnswer& a, const AnswerEnd& end, const AnswerUsage& usage) = 0;
  // A streamed answer's SSE text: the events before any output (`usage`:
  // its prompt's counts), those of each piece (`so_far`: the answer with the
  // piece in it), and those at its end.
  virtual std::string stream_start(const AnswerUsage& usage) = 0;
  virtual std::string stream_piece(const ChoiceDelta& piece, const ChoiceAnswer& so_far) = 0;
  virtual std::string stream_end(const ChoiceAnswer& a, const AnswerEnd& end, const AnswerUsage& usage) = 0;
  // The event that ends a stream that failed after it began.
  virtual std::string stream_error(const openai::RequestError& e) = 0;
};

}  // namespace kvlm
