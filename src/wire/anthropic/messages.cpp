#include "wire/anthropic/messages.h"

#include <fmt/format.h>

#include "common/error.h"
#include "wire/openai/fields.h"
#include "wire/openai/json_text.h"

namespace kvlm::anthropic {

using openai::invalid_field;

namespace {

// A block with `cache_control` is a KV chunk hint (docs/kv-chunks.md).
bool cached(const Json& block) { return openai::field(block, "cache_control") != nullptr; }

// Text blocks as chat content: their text joined with newlines, or, when a
// block has cache_control, the blocks as text parts (which chat joins the
// same way) with that one marked "kv_chunk".
class TextParts {
 public:
  void add(const Json& block) {
    const std::string& t = block["text"].get_ref<const std::string&>();
    if (!text_.empty()) text_ += "\n";
    text_ += t;
    Json part = {{"type", "text"}, {"text", t}};
    if (cached(block)) {
      part["kv_chunk"] = true;
      marked_ = true;
    }
    parts_.push_back(std::move(part));
  }
  bool empty() const { return text_.empty(); }
  // `prefix` comes first (an error's "Error: "), in the first part's text.
  Json content(const std::string& prefix = "") {
    if (!marked_ || parts_.empty()) return prefix + text_;
    parts_[0]["text"] = prefix + parts_[0]["text"].get<std::string>();
    return parts_;
  }

 private:
  std::string text_;
  Json parts_ = Json::array();
  bool marked_ = false;
};

// The content of a block list's text blocks (a string stands for one), for
// system prompts and tool results; `param` names the field in a refusal.
TextParts text_of(const Json& content, const std::string& param) {
  TextParts out;
  if (content.is_string()) {
    out.add(Json{{"text", content}});
    return out;
  }
  if (!content.is_array()) invalid_field(param, fmt::format("'{}' must be a string or a list of blocks", param));
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& b = content[i];
    const std::string type = b.is_object() ? b.value("type", "") : "";
    if (type != "text" || !b.contains("text") || !b["text"].is_string())
      invalid_field(fmt::format("{}[{}]", param, i), fmt::format("'{}[{}]': kvlm reads text blocks only here", param, i));
    out.add(b);
  }
  return out;
}

// A tool_result block as a tool message; with cache_control the whole result
// is a KV chunk.
Json tool_message(const Json& b, const std::string& where) {
  const Json* inner = openai::field(b, "content");
  TextParts result = inner ? text_of(*inner, where + ".content") : TextParts();
  Json m = {{"role", "tool"}, {"tool_call_id", b.value("tool_use_id", "")},
            {"content", result.content(b.value("is_error", false) ? "Error: " : "")}};
  if (cached(b)) m["kv_chunk"] = true;
  return m;
}

// A user turn: its tool results as tool messages, then its text (if any).
void add_user(const Json& content, const std::string& param, Json& messages) {
  if (content.is_string()) {
    messages.push_back({{"role", "user"}, {"content", content}});
    return;
  }
  TextParts text;
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& b = content[i];
    const std::string where = fmt::format("{}[{}]", param, i);
    const std::string type = b.is_object() ? b.value("type", "") : "";
    if (type == "tool_result") {
      messages.push_back(tool_message(b, where));
    } else if (type == "text" && b.contains("text") && b["text"].is_string()) {
      text.add(b);
    } else {
      invalid_field(where, fmt::format("'{}': a block of type '{}' is not supported (kvlm reads text, tool_use and "
                                       "tool_result blocks)", where, type));
    }
  }
  if (!text.empty()) messages.push_back({{"role", "user"}, {"content", text.content()}});
}

// An assistant turn: its text as content, its tool_use blocks as calls.
void add_assistant(const Json& content, const std::string& param, Json& messages) {
  Json m = {{"role", "assistant"}, {"content", content.is_string() ? content : Json("")}};
  if (content.is_array()) {
    std::string text;
    Json calls = Json::array();
    for (size_t i = 0; i < content.size(); ++i) {
      const Json& b = content[i];
      const std::string type = b.is_object() ? b.value("type", "") : "";
      if (type == "text" && b.contains("text") && b["text"].is_string()) {
        text += b["text"].get<std::string>();
      } else if (type == "tool_use") {
        const Json input = b.contains("input") ? b["input"] : Json::object();
        calls.push_back({{"id", b.value("id", "")}, {"type", "function"},
                         {"function", {{"name", b.value("name", "")}, {"arguments", input.dump()}}}});
      } else if (type != "thinking" && type != "redacted_thinking") {
        invalid_field(fmt::format("{}[{}]", param, i), fmt::format("'{}[{}]': a block of type '{}' is not supported "
                                                                   "in an assistant turn", param, i, type));
      }
    }
    m["content"] = text;
    if (!calls.empty()) m["tool_calls"] = std::move(calls);
  }
  messages.push_back(std::move(m));
}

Json chat_messages(const Json& body) {
  Json messages = Json::array();
  if (const Json* system = openai::field(body, "system"))
    messages.push_back({{"role", "system"}, {"content", text_of(*system, "system").content()}});
  const Json* list = openai::field(body, "messages");
  if (!list || !list->is_array() || list->empty()) invalid_field("messages", "'messages' must be a non-empty list");
  for (size_t i = 0; i < list->size(); ++i) {
    const Json& m = (*list)[i];
    const std::string param = fmt::format("messages[{}]", i);
    const std::string role = m.is_object() ? m.value("role", "") : "";
    const Json content = m.is_object() && m.contains("content") ? m["content"] : Json();
    if (!content.is_string() && !content.is_array())
      invalid_field(param + ".content", fmt::format("'{}.content' must be a string or a list of blocks", param));
    if (role == "user") {
      add_user(content, param + ".content", messages);
    } else if (role == "assistant") {
      add_assistant(content, param + ".content", messages);
    } else {
      invalid_field(param + ".role", fmt::format("'{}.role' must be \"user\" or \"assistant\"", param));
    }
  }
  return messages;
}

// tools and tool_choice into `out`.
void chat_tools(const Json& body, Json& out) {
  const Json* tools = openai::field(body, "tools");
  if (!tools) return;
  if (!tools->is_array()) invalid_field("tools", "'tools' must be a list");
  Json fns = Json::array();
  for (size_t i = 0; i < tools->size(); ++i) {
    const Json& t = (*tools)[i];
    const std::string type = t.is_object() ? t.value("type", "custom") : "";
    if (type != "custom" || !t.contains("input_schema"))
      invalid_field(fmt::format("tools[{}]", i), fmt::format("'tools[{}]': the server tool '{}' is not supported: "
                                                             "kvlm runs client tools (name, input_schema)", i, type));
    Json fn = {{"name", t.value("name", "")}, {"parameters", t["input_schema"]}};
    if (t.contains("description")) fn["description"] = t["description"];
    fns.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  out["tools"] = std::move(fns);
  const Json* choice = openai::field(body, "tool_choice");
  if (!choice) return;
  const std::string type = choice->is_object() ? choice->value("type", "") : "";
  if (type == "auto") out["tool_choice"] = "auto";
  else if (type == "any") out["tool_choice"] = "required";
  else if (type == "none") out["tool_choice"] = "none";
  else if (type == "tool") out["tool_choice"] = {{"type", "function"}, {"function", {{"name", choice->value("name", "")}}}};
  else invalid_field("tool_choice", "'tool_choice.type' must be auto, any, tool or none");
  if (choice->value("disable_parallel_tool_use", false)) out["parallel_tool_calls"] = false;
}

// `counting`: a count_tokens request, which has no max_tokens.
Json to_chat(const Json& body, bool counting) {
  if (!body.is_object()) invalid_field("body", "the body must be a JSON object");
  Json out = {{"messages", chat_messages(body)}};
  const auto max_tokens = openai::integer_field(body, "max_tokens", 1, 1 << 30);
  if (!max_tokens && !counting) invalid_field("max_tokens", "'max_tokens' is required");
  if (max_tokens) out["max_tokens"] = *max_tokens;
  for (const char* key : {"model", "temperature", "top_p", "top_k", "stream", "kv_blend_recompute"})
    if (const Json* v = openai::field(body, key)) out[key] = *v;
  if (const Json* stop = openai::field(body, "stop_sequences")) out["stop"] = *stop;
  chat_tools(body, out);
  if (const Json* thinking = openai::field(body, "thinking"); thinking && thinking->is_object()) {
    const std::string type = thinking->value("type", "");
    if (type == "enabled" && thinking->contains("budget_tokens")) out["thinking_budget"] = (*thinking)["budget_tokens"];
    if (type == "disabled") out["thinking_budget"] = 0;
  }
  return out;
}

std::string event(const char* name, const Json& data) {
  return fmt::format("event: {}\ndata: {}\n\n", name, openai::dump_json(data));
}

const char* stop_reason(const AnswerEnd& end) {
  switch (end.reason) {
    case AnswerEnd::Reason::kLength: return "max_tokens";
    case AnswerEnd::Reason::kToolCalls: return "tool_use";
    case AnswerEnd::Reason::kStop: break;
  }
  return end.stop_string.empty() ? "end_turn" : "stop_sequence";
}

// Anthropic counts the prompt tokens the cache served apart from input_tokens.
Json usage_json(const AnswerUsage& u) {
  return {{"input_tokens", u.prompt_tokens - u.cached_tokens}, {"output_tokens", u.completion_tokens},
          {"cache_read_input_tokens", u.cached_tokens}, {"cache_creation_input_tokens", 0}};
}

// A call's arguments as its input object ({} when max_tokens cut them).
// parse_json, as for request bodies: nlohmann's own parse is quadratic in
// an object's members, and a model may write many.
Json input_of(const AnsweredCall& c) {
  try {
    Json input = openai::parse_json(c.arguments);
    if (input.is_object()) return input;
  } catch (const Error&) {
  }
  return Json::object();
}

}  // namespace

std::variant<Json, openai::RequestError> chat_body(const Json& body) {
  return openai::validated<Json>([&] { return to_chat(body, /*counting=*/false); });
}

std::variant<Json, openai::RequestError> count_tokens_chat_body(const Json& body) {
  return openai::validated<Json>([&] { return to_chat(body, /*counting=*/true); });
}

Json error_body(const openai::RequestError& e) {
  const char* type = e.status == 401 ? "authentication_error"
                     : e.status == 403 ? "permission_error"
                     : e.status == 404 ? "not_found_error"
                     : e.status == 429 ? "rate_limit_error"
                     : e.status == 413 ? "request_too_large"
                     : e.status == 503 || e.status == 529 ? "overloaded_error"
                     : e.status >= 500 ? "api_error"
                                       : "invalid_request_error";
  return {{"type", "error"}, {"error", {{"type", type}, {"message", e.message}}}};
}

void rewrite_error(int status, std::string& body) {
  if (status < 400) return;
  const Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("error") || !j["error"].is_object()) return;
  body = openai::dump_json(error_body({status, j["error"].value("message", "")}));
}

Json MessageWriter::whole(const ChoiceAnswer& a, const AnswerEnd& end, const AnswerUsage& usage) {
  Json content = Json::array();
  if (!a.reasoning.empty()) content.push_back({{"type", "thinking"}, {"thinking", a.reasoning}, {"signature", ""}});
  if (!a.content.empty()) content.push_back({{"type", "text"}, {"text", a.content}});
  for (const AnsweredCall& c : a.calls)
    content.push_back({{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", input_of(c)}});
  return {{"id", id_}, {"type", "message"}, {"role", "assistant"}, {"model", model_},
          {"content", std::move(content)}, {"stop_reason", stop_reason(end)},
          {"stop_sequence", end.stop_string.empty() ? Json(nullptr) : Json(end.stop_string)},
          {"usage", usage_json(usage)}};
}

std::string MessageWriter::stream_start(const AnswerUsage& usage) {
  const Json message = {{"id", id_}, {"type", "message"}, {"role", "assistant"}, {"model", model_},
                        {"content", Json::array()}, {"stop_reason", nullptr}, {"stop_sequence", nullptr},
                        {"usage", usage_json(usage)}};
  return event("message_start", {{"type", "message_start"}, {"message", message}}) +
         event("ping", {{"type", "ping"}});
}

std::string MessageWriter::close() {
  if (open_ == Block::kNone) return "";
  open_ = Block::kNone;
  return event("content_block_stop", {{"type", "content_block_stop"}, {"index", num_blocks_ - 1}});
}

std::string MessageWriter::open(Block kind, Json start) {
  std::string out = close();
  open_ = kind;
  out += event("content_block_start",
               {{"type", "content_block_start"}, {"index", num_blocks_++}, {"content_block", std::move(start)}});
  return out;
}

std::string MessageWriter::stream_piece(const ChoiceDelta& piece, const ChoiceAnswer& so_far) {
  std::string out;
  auto delta = [&](Json d) {
    out += event("content_block_delta", {{"type", "content_block_delta"}, {"index", num_blocks_ - 1}, {"delta", d}});
  };
  if (!piece.reasoning.empty()) {
    if (open_ != Block::kThinking) out += open(Block::kThinking, {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}});
    delta({{"type", "thinking_delta"}, {"thinking", piece.reasoning}});
  }
  if (!piece.content.empty()) {
    if (open_ != Block::kText) out += open(Block::kText, {{"type", "text"}, {"text", ""}});
    delta({{"type", "text_delta"}, {"text", piece.content}});
  }
  for (const ToolCallDelta& c : piece.calls) {
    if (!c.name.empty()) {
      const AnsweredCall& call = so_far.calls.at(c.index);
      out += open(Block::kToolUse, {{"type", "tool_use"}, {"id", call.id}, {"name", c.name}, {"input", Json::object()}});
    }
    if (!c.arguments.empty() && open_ == Block::kToolUse) delta({{"type", "input_json_delta"}, {"partial_json", c.arguments}});
  }
  return out;
}

std::string MessageWriter::stream_end(const ChoiceAnswer&, const AnswerEnd& end, const AnswerUsage& usage) {
  const Json delta = {{"stop_reason", stop_reason(end)},
                      {"stop_sequence", end.stop_string.empty() ? Json(nullptr) : Json(end.stop_string)}};
  return close() + event("message_delta", {{"type", "message_delta"}, {"delta", delta}, {"usage", usage_json(usage)}}) +
         event("message_stop", {{"type", "message_stop"}});
}

std::string MessageWriter::stream_error(const openai::RequestError& e) { return event("error", error_body(e)); }

}  // namespace kvlm::anthropic
