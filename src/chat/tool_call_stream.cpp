#include "chat/tool_call_stream.h"

#include <algorithm>

namespace kvlm {

std::string ToolCallStream::push(std::string_view text) {
  text_.append(text);
  const size_t start = tool_call_start(format_, text_);
  // Never less than what was sent: sent text held no marker nor a partial one at its end.
  const size_t limit = std::max(sent_, start == std::string_view::npos ? text_.size() : start);
  std::string out = text_.substr(sent_, limit - sent_);
  sent_ = limit;
  return out;
}

ParsedToolCalls ToolCallStream::finish(bool parse) {
  ParsedToolCalls p = parse ? parse_tool_calls(format_, text_) : ParsedToolCalls{text_, {}};
  if (!parallel_ && p.calls.size() > 1) p.calls.resize(1);
  const std::string_view sent(text_.data(), sent_);
  // The parsed content starts with what was sent (calls begin after it); the
  // generic format's {"response": ...} is sent whole (nothing of it was sent).
  if (std::string_view(p.content).substr(0, sent_) == sent) {
    p.content.erase(0, sent_);
  } else {
    p.content.clear();
  }
  text_.clear();
  sent_ = 0;
  return p;
}

}  // namespace kvlm
