#include "chat/tool_call_stream.h"

#include <algorithm>

namespace kvlm {

ToolCallUpdate ToolCallStream::push(std::string_view text) {
  text_.append(text);
  ToolCallUpdate out;
  const size_t start = tool_call_start(format_, text_);
  // Content stops at the first call: text between calls waits for the end.
  if (sent_args_.empty()) {
    // Never less than what was sent: sent text held no marker nor a partial one at its end.
    const size_t limit = std::max(sent_, start == std::string_view::npos ? text_.size() : start);
    out.content = text_.substr(sent_, limit - sent_);
    sent_ = limit;
  }
  if (start != std::string_view::npos) send_calls(out.calls);
  return out;
}

void ToolCallStream::send_calls(std::vector<ToolCallDelta>& out) {
  const CutToolCalls c = parse_cut_tool_calls(format_, text_);
  const size_t n = parallel_ ? c.calls.size() : std::min<size_t>(c.calls.size(), 1);
  for (size_t k = 0; k < n; ++k) {
    const ToolCall& call = c.calls[k];
    if (k < sent_args_.size()) {
      std::string& sent = sent_args_[k];
      if (call.arguments.size() > sent.size() && call.arguments.compare(0, sent.size(), sent) == 0) {
        out.push_back({k, "", call.arguments.substr(sent.size())});
        sent = call.arguments;
      }
      continue;
    }
    // A call being written is sent once its name is whole and its arguments
    // have begun as an object (JSON text in a string is sent whole).
    const bool open = c.last_open && k + 1 == c.calls.size();
    if (open && (c.name_cut || call.arguments.empty() || call.arguments[0] != '{')) break;
    out.push_back({k, call.name, call.arguments});
    sent_args_.push_back(call.arguments);
  }
}

void ToolCallStream::drop_sent(std::string& content) const {
  const std::string_view sent(text_.data(), sent_);
  // The parsed content starts with what was sent (calls begin after it); the
  // generic format's {"response": ...} is sent whole (nothing of it was sent).
  if (std::string_view(content).substr(0, sent_) == sent) {
    content.erase(0, sent_);
  } else {
    content.clear();
  }
}

std::vector<ToolCallDelta> ToolCallStream::rest_of(const std::vector<ToolCall>& calls) const {
  std::vector<ToolCallDelta> out;
  for (size_t k = 0; k < calls.size(); ++k) {
    const ToolCall& call = calls[k];
    if (k >= sent_args_.size()) {
      out.push_back({k, call.name, call.arguments});
      continue;
    }
    const std::string& sent = sent_args_[k];
    if (call.arguments.size() > sent.size() && call.arguments.compare(0, sent.size(), sent) == 0)
      out.push_back({k, "", call.arguments.substr(sent.size())});
  }
  return out;
}

ToolCallEnd ToolCallStream::finish(bool cut) {
  ToolCallEnd end;
  if (!cut) {
    ParsedToolCalls p = parse_tool_calls(format_, text_);
    // A call already sent stays a call, as far as it got, even if the rest
    // of the output spoils the whole parse.
    cut = p.calls.empty() && !sent_args_.empty();
    if (!cut) {
      if (!parallel_ && p.calls.size() > 1) p.calls.resize(1);
      end.rest.content = std::move(p.content);
      end.calls = std::move(p.calls);
    }
  }
  if (cut) {
    CutToolCalls c = parse_cut_tool_calls(format_, text_);
    end.rest.content = std::move(c.content);
    end.calls = ready_cut_calls(std::move(c), parallel_, names_);
  }
  drop_sent(end.rest.content);
  end.rest.calls = rest_of(end.calls);
  return end;
}

std::vector<ToolCall> ready_cut_calls(CutToolCalls cut, bool parallel, const std::vector<std::string>& names) {
  if (cut.name_cut && !cut.calls.empty()) {
    ToolCall& last = cut.calls.back();
    std::vector<std::string> begun;
    for (const std::string& n : names)
      if (n.rfind(last.name, 0) == 0) begun.push_back(n);
    if (begun.size() == 1) {
      last.name = begun[0];
    } else {
      cut.calls.pop_back();  // no telling which function it was
    }
  }
  if (!parallel && cut.calls.size() > 1) cut.calls.resize(1);
  return std::move(cut.calls);
}

}  // namespace kvlm
