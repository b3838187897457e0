// Tool calls in a streamed output, as OpenAI streams them: text is content
// as soon as it cannot be part of a call; from where a call may begin (a
// marker, or a partial marker at the end) it is held back; a call is sent
// once its name is whole and its arguments (a JSON object) have begun, and
// then its arguments in pieces as they are written (compacted, so the
// pieces add up to the final arguments: tool_calls.h). At the end the
// output is parsed whole; held text that turned out not to be a call is
// sent as content then, so a client sees what parse_tool_calls would give.
// A non-streamed answer runs the same class over the whole text, so both
// answers agree.
//
//   ToolCallStream s(ToolCallFormat::kHermes, /*parallel=*/true, tool_names);
//   for (text piece : output) send(s.push(piece));       // content and call pieces
//   ToolCallEnd end = s.finish(/*cut=*/false);          // the rest; end.calls: every call
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "chat/tool_calls.h"

namespace kvlm {

// A piece of call `index` (0, 1, ... in the order the model wrote them):
// its first piece carries its name.
struct ToolCallDelta {
  size_t index = 0;
  std::string name;       // the call's name on its first piece; empty after
  std::string arguments;  // the next piece of its arguments' JSON text
};

// What may be sent after a piece of output.
struct ToolCallUpdate {
  std::string content;
  std::vector<ToolCallDelta> calls;
};

// The end of an output: what was not sent yet, and the whole answer's calls.
struct ToolCallEnd {
  ToolCallUpdate rest;
  std::vector<ToolCall> calls;  // every call, as the answer gives them (empty: plain content)
};

class ToolCallStream {
 public:
  // parallel false: only the first call is kept (parallel_tool_calls:
  // false, or a named tool_choice). `names`: the tools, to complete a name
  // that max_tokens cut off.
  ToolCallStream(ToolCallFormat format, bool parallel, std::vector<std::string> names = {})
      : format_(format), parallel_(parallel), names_(std::move(names)) {}

  // Appends `text`; returns the content and call pieces that may be sent now.
  ToolCallUpdate push(std::string_view text);
  // The output has ended; `cut`: by max_tokens, inside a call maybe. A call
  // cut off is still a call (OpenAI answers so, finish_reason "length"):
  // its arguments so far, its name completed to the one tool it begins (or
  // left out when it begins none or several, or had not begun).
  ToolCallEnd finish(bool cut);
  // Calls sent so far (their first piece).
  size_t num_calls_sent() const { return sent_args_.size(); }

 private:
  // The calls of the output so far, read as a cut output.
  void send_calls(std::vector<ToolCallDelta>& out);
  // Drops the content already sent from the front of `content`.
  void drop_sent(std::string& content) const;
  // The pieces that bring the calls sent so far to `calls`.
  std::vector<ToolCallDelta> rest_of(const std::vector<ToolCall>& calls) const;

  ToolCallFormat format_;
  bool parallel_;
  std::vector<std::string> names_;
  std::string text_;  // the whole output so far
  size_t sent_ = 0;   // text_[0, sent_) has been returned as content
  std::vector<std::string> sent_args_;  // per call sent: its arguments so far
};

// The calls of a cut output made ready to answer (ToolCallStream::finish):
// the last one's cut name completed to the one of `names` it begins (left
// out when it begins none or several); only the first when not parallel.
std::vector<ToolCall> ready_cut_calls(CutToolCalls cut, bool parallel, const std::vector<std::string>& names);

}  // namespace kvlm
