// Tool calls in a streamed output: text is sent as content as soon as it
// cannot be part of a call; from where a call may begin (a marker, or a
// partial marker at the end) it is held back until the output ends, then
// parsed whole. Held text that turns out not to be a call is sent as content
// then, so a client sees exactly what parse_tool_calls would give.
//
//   ToolCallStream s(ToolCallFormat::kHermes, /*parallel=*/true);
//   for (text piece : output) send_content(s.push(piece));
//   ParsedToolCalls rest = s.finish();   // rest.content: the content not yet sent
#pragma once

#include <string>
#include <string_view>

#include "chat/tool_calls.h"

namespace kvlm {

class ToolCallStream {
 public:
  // parallel false: only the first call is kept (parallel_tool_calls: false).
  ToolCallStream(ToolCallFormat format, bool parallel) : format_(format), parallel_(parallel) {}

  // Appends `text`; returns the content that may be sent now (maybe empty).
  std::string push(std::string_view text);
  // The output has ended: the content not yet sent and the calls. parse
  // false (an output cut off by max_tokens): no calls, all of it content.
  ParsedToolCalls finish(bool parse = true);

 private:
  ToolCallFormat format_;
  bool parallel_;
  std::string text_;  // the whole output so far
  size_t sent_ = 0;   // text_[0, sent_) has been returned as content
};

}  // namespace kvlm
