#include "server/choice_decoder.h"

#include "server/routes_choices.h"
#include "server/routes_tools.h"

namespace kvlm {

ChoiceDecoder::ChoiceDecoder(const Generation& gen) {
  if (gen.reasoning) reasoning_.emplace(gen.reasoning->markers, gen.reasoning->opened);
  if (gen.tool_calls) {
    format_ = gen.tool_calls->format;
    tools_.emplace(gen.tool_calls->format, gen.tool_calls->parallel, gen.tool_calls->names);
  }
}

ChoiceDelta ChoiceDecoder::push(std::string_view text) {
  ChoiceDelta out;
  if (!reasoning_) {
    take_content(std::string(text), out);
    return out;
  }
  ReasoningPiece p = reasoning_->push(text);
  answer_.reasoning += p.reasoning;
  out.reasoning = std::move(p.reasoning);
  take_content(std::move(p.content), out);
  return out;
}

void ChoiceDecoder::take_content(std::string text, ChoiceDelta& out) {
  if (text.empty()) return;
  if (!tools_) {
    answer_.content += text;
    out.content += text;
    return;
  }
  ToolCallUpdate u = tools_->push(text);
  answer_.content += u.content;
  out.content += u.content;
  take_calls(std::move(u.calls), out);
}

void ChoiceDecoder::take_calls(std::vector<ToolCallDelta> calls, ChoiceDelta& out) {
  for (ToolCallDelta& d : calls) {
    if (d.index >= answer_.calls.size()) answer_.calls.push_back({new_tool_call_id(format_), d.name, ""});
    answer_.calls[d.index].arguments += d.arguments;
    out.calls.push_back(std::move(d));
  }
}

ChoiceDelta ChoiceDecoder::finish(bool cut) {
  ChoiceDelta out;
  if (reasoning_) {
    ReasoningPiece p = reasoning_->finish();
    answer_.reasoning += p.reasoning;
    out.reasoning = std::move(p.reasoning);
    take_content(std::move(p.content), out);
  }
  if (!tools_) return out;
  ToolCallEnd end = tools_->finish(cut);
  // Beside calls, space alone (what separates them) is no content.
  const bool only_space = end.rest.content.find_first_not_of(" \t\r\n") == std::string::npos;
  if (end.calls.empty() || !only_space) {
    answer_.content += end.rest.content;
    out.content += end.rest.content;
  }
  if (!end.calls.empty()) {
    const size_t first = answer_.content.find_first_not_of(" \t\r\n");
    answer_.content = first == std::string::npos
                          ? ""
                          : answer_.content.substr(first, answer_.content.find_last_not_of(" \t\r\n") - first + 1);
  }
  take_calls(std::move(end.rest.calls), out);
  // The parse of the whole output is the answer's (the pieces sent add up to it).
  answer_.calls.resize(end.calls.size());
  for (size_t k = 0; k < end.calls.size(); ++k) {
    AnsweredCall& c = answer_.calls[k];
    if (c.id.empty()) c.id = new_tool_call_id(format_);
    c.name = std::move(end.calls[k].name);
    c.arguments = std::move(end.calls[k].arguments);
  }
  return out;
}

}  // namespace kvlm
