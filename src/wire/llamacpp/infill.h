// llama.cpp's POST /infill, the fill-in-the-middle API code assistants
// (llama.vscode, llama.vim) call: the request read into plain data and a
// completions body for the generation options, and the answer written in
// llama.cpp's native shape ({"content", "stop", ...}; streamed as SSE
// `data:` events of the same, no [DONE]).
#pragma once

#include <string>
#include <variant>
#include <vector>

#include "wire/answer_writer.h"
#include "wire/openai/protocol.h"

namespace kvlm::llamacpp {

using Json = openai::Json;

struct InfillChunk {
  std::string filename;
  std::string text;
};

struct InfillRequest {
  std::string input_prefix;  // the code before the gap
  std::string input_suffix;  // the code after it
  std::string prompt;        // text after the middle token (what the user typed at the gap)
  std::vector<InfillChunk> input_extra;  // other files for context
  // The generation options in OpenAI's completions spelling (n_predict as
  // max_tokens, repeat_penalty as repetition_penalty, ...), with a
  // placeholder prompt: parse_completion_request reads and checks them.
  Json completion_body;
};

std::variant<InfillRequest, openai::RequestError> parse_infill_request(const Json& body);

// llama.cpp's answer to /infill and /completion, from the one choice.
class InfillWriter : public AnswerWriter {
 public:
  explicit InfillWriter(std::string model) : model_(std::move(model)) {}

  Json whole(const ChoiceAnswer& a, const AnswerEnd& end, const AnswerUsage& usage) override;
  std::string stream_start(const AnswerUsage& usage) override;
  std::string stream_piece(const ChoiceDelta& piece, const ChoiceAnswer& so_far) override;
  std::string stream_end(const ChoiceAnswer& a, const AnswerEnd& end, const AnswerUsage& usage) override;
  std::string stream_error(const openai::RequestError& e) override;

 private:
  Json final_fields(const AnswerEnd& end, const AnswerUsage& usage) const;
  std::string model_;
};

}  // namespace kvlm::llamacpp
