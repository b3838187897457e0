// One choice's output read the way every API answers it: the thinking apart
// from the answer (chat/reasoning.h), then the answer's tool calls apart
// from its content (chat/tool_call_stream.h). Streamed answers push each
// event's text and send the pieces; whole answers push the whole text; both
// end with finish(), so the two always agree. Each front end (chat,
// responses, messages) only formats what it gets. Internal to server/.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/reasoning.h"
#include "chat/tool_call_stream.h"
#include "wire/answer.h"

namespace kvlm {

struct Generation;

class ChoiceDecoder {
 public:
  // Reads the output as `gen` asks: its thinking apart when gen.reasoning is
  // set, its calls when gen.tool_calls is (`gen` is read here only).
  explicit ChoiceDecoder(const Generation& gen);

  ChoiceDelta push(std::string_view text);
  // The output has ended (cut: by max_tokens): what was held back. Beside
  // calls, the answer's content is trimmed, and space alone is not sent.
  ChoiceDelta finish(bool cut);
  const ChoiceAnswer& answer() const { return answer_; }
  // The id of call `index` (fixed when its first piece is made).
  const std::string& call_id(size_t index) const { return answer_.calls.at(index).id; }

 private:
  // The answer's part of `piece` through the tool-call reader.
  void take_content(std::string text, ChoiceDelta& out);
  void take_calls(std::vector<ToolCallDelta> calls, ChoiceDelta& out);

  ToolCallFormat format_ = ToolCallFormat::kGeneric;  // of the call ids
  std::optional<ReasoningSplitter> reasoning_;
  std::optional<ToolCallStream> tools_;
  ChoiceAnswer answer_;
};

}  // namespace kvlm
