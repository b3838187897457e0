// A response's SSE events, as OpenAI streams them: response.created and
// response.in_progress, then per output item (reasoning, message,
// function_call) its output_item.added, the deltas of its text
// (reasoning_summary_text, output_text, function_call_arguments) and its
// .done events, then response.completed (or response.incomplete when
// max_output_tokens cut it) with the whole response.
#include <fmt/format.h>

#include "wire/responses/responses.h"

namespace kvlm::responses {

std::string ResponseWriter::stream_start(const AnswerUsage&) {
  const Json r = response("in_progress", Json::array(), nullptr);
  // One after the other: their sequence numbers follow the order they are sent in.
  std::string out = event("response.created", {{"response", r}});
  out += event("response.in_progress", {{"response", r}});
  return out;
}

std::string ResponseWriter::open(Item kind, Json item) {
  std::string out = close();
  open_ = kind;
  open_item_ = std::move(item);
  open_text_.clear();
  const size_t index = items_.size();
  out += event("response.output_item.added", {{"output_index", index}, {"item", open_item_}});
  const Json id = open_item_["id"];
  if (kind == Item::kMessage)
    out += event("response.content_part.added",
                 {{"item_id", id}, {"output_index", index}, {"content_index", 0},
                  {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", Json::array()}}}});
  if (kind == Item::kReasoning)
    out += event("response.reasoning_summary_part.added", {{"item_id", id}, {"output_index", index}, {"summary_index", 0},
                                                           {"part", {{"type", "summary_text"}, {"text", ""}}}});
  return out;
}

std::string ResponseWriter::close(const char* status) {
  if (open_ == Item::kNone) return "";
  const size_t index = items_.size();
  const Json id = open_item_["id"];
  Json item = open_item_;
  std::string out;
  if (open_ == Item::kReasoning) {
    out += event("response.reasoning_summary_text.done",
                 {{"item_id", id}, {"output_index", index}, {"summary_index", 0}, {"text", open_text_}});
    const Json part = {{"type", "summary_text"}, {"text", open_text_}};
    out += event("response.reasoning_summary_part.done",
                 {{"item_id", id}, {"output_index", index}, {"summary_index", 0}, {"part", part}});
    item["summary"] = Json::array({part});
  } else if (open_ == Item::kMessage) {
    out += event("response.output_text.done", {{"item_id", id}, {"output_index", index}, {"content_index", 0},
                                               {"text", open_text_}, {"logprobs", Json::array()}});
    const Json part = {{"type", "output_text"}, {"text", open_text_}, {"annotations", Json::array()}};
    out += event("response.content_part.done", {{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"part", part}});
    item["content"] = Json::array({part});
    item["status"] = status;
  } else {
    out += event("response.function_call_arguments.done",
                 {{"item_id", id}, {"output_index", index}, {"arguments", open_text_}});
    item["arguments"] = open_text_;
    item["status"] = status;
  }
  out += event("response.output_item.done", {{"output_index", index}, {"item", item}});
  items_.push_back(std::move(item));
  open_ = Item::kNone;
  return out;
}

std::string ResponseWriter::stream_piece(const ChoiceDelta& piece, const ChoiceAnswer& so_far) {
  std::string out;
  const auto index = [&] { return items_.size(); };
  if (!piece.reasoning.empty()) {
    if (open_ != Item::kReasoning)
      out += open(Item::kReasoning, {{"type", "reasoning"}, {"id", item_id("rs")}, {"summary", Json::array()}});
    open_text_ += piece.reasoning;
    out += event("response.reasoning_summary_text.delta", {{"item_id", open_item_["id"]}, {"output_index", index()},
                                                           {"summary_index", 0}, {"delta", piece.reasoning}});
  }
  if (!piece.content.empty()) {
    if (open_ != Item::kMessage)
      out += open(Item::kMessage, {{"type", "message"}, {"id", item_id("msg")}, {"status", "in_progress"},
                                   {"role", "assistant"}, {"content", Json::array()}});
    open_text_ += piece.content;
    out += event("response.output_text.delta", {{"item_id", open_item_["id"]}, {"output_index", index()},
                                                {"content_index", 0}, {"delta", piece.content},
                                                {"logprobs", Json::array()}});
  }
  for (const ToolCallDelta& c : piece.calls) {
    if (!c.name.empty())
      out += open(Item::kFunctionCall, {{"type", "function_call"}, {"id", item_id("fc")},
                                        {"call_id", so_far.calls.at(c.index).id}, {"name", c.name},
                                        {"arguments", ""}, {"status", "in_progress"}});
    if (c.arguments.empty() || open_ != Item::kFunctionCall) continue;
    open_text_ += c.arguments;
    out += event("response.function_call_arguments.delta",
                 {{"item_id", open_item_["id"]}, {"output_index", index()}, {"delta", c.arguments}});
  }
  return out;
}

std::string ResponseWriter::stream_end(const ChoiceAnswer& a, const AnswerEnd& end, const AnswerUsage& usage) {
  std::string out;
  // No answer (nothing, or only thinking) is one empty message, as the
  // whole answer gives it.
  if (a.content.empty() && a.calls.empty())
    out += open(Item::kMessage, {{"type", "message"}, {"id", item_id("msg")}, {"status", "in_progress"},
                                 {"role", "assistant"}, {"content", Json::array()}});
  const bool cut = end.reason == AnswerEnd::Reason::kLength;
  // The open item is the one the token limit cut; those closed before it are whole.
  out += close(cut ? "incomplete" : "completed");
  Json r = response(cut ? "incomplete" : "completed", items_, usage_json(usage));
  if (done_) done_(r, a);
  return out + event(cut ? "response.incomplete" : "response.completed", {{"response", std::move(r)}});
}

std::string ResponseWriter::stream_error(const openai::RequestError& e) {
  return event("error", {{"code", e.code.value_or(e.type)}, {"message", e.message},
                         {"param", e.param ? Json(*e.param) : Json(nullptr)}});
}

}  // namespace kvlm::responses
