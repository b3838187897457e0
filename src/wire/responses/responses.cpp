#include "wire/responses/responses.h"

#include <fmt/format.h>

#include "tokenizer/unicode.h"
#include "wire/openai/fields.h"
#include "wire/openai/json_text.h"
#include "wire/openai/kv_chunks.h"
#include "wire/responses/input_items.h"

namespace kvlm::responses {

using openai::invalid_field;

std::string item_id(const char* prefix) {
  std::string id = openai::new_id(prefix);
  id[id.find('-')] = '_';
  return id;
}

Json usage_json(const AnswerUsage& u) {
  return {{"input_tokens", u.prompt_tokens}, {"input_tokens_details", {{"cached_tokens", u.cached_tokens}}},
          {"output_tokens", u.completion_tokens},
          {"output_tokens_details", {{"reasoning_tokens", u.reasoning_tokens}}},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

namespace {

// A message item's text: a string, or its input_text/output_text parts.
std::string text_of(const Json& content, const std::string& param) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) invalid_field(param, fmt::format("'{}' must be a string or a list of parts", param));
  std::string out;
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& p = content[i];
    const std::string type = p.is_object() ? p.value("type", "") : "";
    if ((type != "input_text" && type != "output_text" && type != "text") || !p.contains("text"))
      invalid_field(fmt::format("{}[{}]", param, i),
                    fmt::format("'{}[{}]': a part of type '{}' is not supported (kvlm reads text)", param, i, type));
    out += p["text"].get<std::string>();
  }
  return out;
}

// One input item as chat messages appended to `out`.
void add_item(const Json& item, const std::string& param, Json& out) {
  const std::string type = item.is_object() ? item.value("type", "message") : "";
  if (type == "message") {
    std::string role = item.value("role", "");
    if (role == "developer") role = "system";
    if (role != "user" && role != "system" && role != "assistant")
      invalid_field(param + ".role", fmt::format("'{}.role' must be user, system, developer or assistant", param));
    out.push_back({{"role", role}, {"content", text_of(item.contains("content") ? item["content"] : Json(), param + ".content")}});
    if (openai::kv_chunk_mark(item, param)) out.back()["kv_chunk"] = true;
  } else if (type == "function_call") {
    const Json call = {{"id", item.value("call_id", "")}, {"type", "function"},
                       {"function", {{"name", item.value("name", "")}, {"arguments", item.value("arguments", "{}")}}}};
    // Calls of one turn go into one assistant message.
    if (out.empty() || out.back()["role"] != "assistant") out.push_back({{"role", "assistant"}, {"content", ""}});
    out.back()["tool_calls"].push_back(call);
  } else if (type == "function_call_output") {
    const Json& o = item.contains("output") ? item["output"] : Json("");
    out.push_back({{"role", "tool"}, {"tool_call_id", item.value("call_id", "")},
                   {"content", o.is_string() ? o.get<std::string>() : text_of(o, param + ".output")}});
    if (openai::kv_chunk_mark(item, param)) out.back()["kv_chunk"] = true;
  } else if (type != "reasoning") {
    invalid_field(param, fmt::format("'{}': an input item of type '{}' is not supported", param, type));
  }
}

// The stored item an item_reference names, or the 404 that names its id.
Json referenced_item(const Json& ref, const std::string& param, const ItemLookup& lookup) {
  const Json* id = openai::field(ref, "id");
  if (!id || !id->is_string()) invalid_field(param + ".id", fmt::format("'{}.id' must be an item's id", param));
  const std::string& name = id->get_ref<const std::string&>();
  std::optional<Json> item = lookup(name);
  if (!item) {
    openai::RequestError e{404, fmt::format("Item with id '{}' not found.", unicode::sanitize_utf8(name)),
                           param + ".id"};
    e.code = "not_found";
    throw openai::FieldError{std::move(e)};
  }
  return std::move(*item);
}

// The request's input as chat messages (r.input) and as listed items
// (r.input_items), item references resolved.
void read_input(const Json& body, const ItemLookup& lookup, Request& r) {
  const Json* input = openai::field(body, "input");
  if (!input) invalid_field("input", "'input' is required");
  r.input = Json::array();
  r.input_items = Json::array();
  if (input->is_string()) {
    r.input.push_back({{"role", "user"}, {"content", *input}});
    r.input_items.push_back(listed_item(r.input.back()));
    return;
  }
  if (!input->is_array()) invalid_field("input", "'input' must be a string or a list of items");
  for (size_t i = 0; i < input->size(); ++i) {
    const Json& item = (*input)[i];
    const std::string param = fmt::format("input[{}]", i);
    if (item.is_object() && item.value("type", "") == "item_reference") {
      Json stored = referenced_item(item, param, lookup);
      add_item(stored, param, r.input);
      r.input_items.push_back(std::move(stored));  // under its own id
    } else {
      add_item(item, param, r.input);
      r.input_items.push_back(listed_item(item));
    }
  }
}

// tools, tool_choice and text.format into the chat body `out`.
void chat_tools_and_format(const Json& body, Json& out) {
  if (const Json* tools = openai::field(body, "tools")) {
    if (!tools->is_array()) invalid_field("tools", "'tools' must be a list");
    Json fns = Json::array();
    for (size_t i = 0; i < tools->size(); ++i) {
      const Json& t = (*tools)[i];
      const std::string type = t.is_object() ? t.value("type", "") : "";
      if (type != "function")
        invalid_field(fmt::format("tools[{}].type", i), fmt::format("'tools[{}]': the built-in tool '{}' is not "
                                                                    "supported: kvlm runs function tools", i, type));
      Json fn = {{"name", t.value("name", "")}};
      for (const char* key : {"description", "parameters", "strict"})
        if (t.contains(key) && !t[key].is_null()) fn[key] = t[key];
      fns.push_back({{"type", "function"}, {"function", std::move(fn)}});
    }
    out["tools"] = std::move(fns);
  }
  if (const Json* choice = openai::field(body, "tool_choice")) {
    if (choice->is_object() && choice->value("type", "") == "function")
      out["tool_choice"] = {{"type", "function"}, {"function", {{"name", choice->value("name", "")}}}};
    else if (choice->is_string())
      out["tool_choice"] = *choice;
    else
      invalid_field("tool_choice", "'tool_choice' must be auto, none, required or a function");
  }
  const Json* text = openai::field(body, "text");
  const Json* format = text && text->is_object() ? openai::field(*text, "format") : nullptr;
  if (!format) return;
  const std::string type = format->is_object() ? format->value("type", "") : "";
  if (type == "json_schema") {
    Json schema = {{"name", format->value("name", "response")}, {"schema", format->value("schema", Json::object())}};
    if (format->contains("strict")) schema["strict"] = (*format)["strict"];
    out["response_format"] = {{"type", "json_schema"}, {"json_schema", std::move(schema)}};
  } else if (type == "json_object") {
    out["response_format"] = {{"type", "json_object"}};
  } else if (type != "text") {
    invalid_field("text.format", "'text.format.type' must be text, json_schema or json_object");
  }
}

Request to_request(const Json& body, const ItemLookup& lookup) {
  if (!body.is_object()) invalid_field("body", "the body must be a JSON object");
  if (openai::bool_field(body, "background").value_or(false))
    invalid_field("background", "'background': kvlm answers in the foreground only", "unsupported_parameter");
  Request r;
  read_input(body, lookup, r);
  r.instructions = openai::string_field(body, "instructions");
  r.previous_response_id = openai::string_field(body, "previous_response_id");
  r.store = openai::bool_field(body, "store").value_or(true);
  r.chat = Json::object();
  for (const char* key : {"model", "temperature", "top_p", "stream", "parallel_tool_calls", "user", "kv_blend_recompute"})
    if (const Json* v = openai::field(body, key)) r.chat[key] = *v;
  if (const auto n = openai::integer_field(body, "max_output_tokens", 1, 1 << 30)) r.chat["max_tokens"] = *n;
  chat_tools_and_format(body, r.chat);
  r.echo = {{"instructions", body.value("instructions", Json())},
            {"max_output_tokens", body.value("max_output_tokens", Json())},
            {"parallel_tool_calls", body.value("parallel_tool_calls", true)},
            {"previous_response_id", body.value("previous_response_id", Json())},
            {"reasoning", body.value("reasoning", Json{{"effort", nullptr}, {"summary", nullptr}})},
            {"store", r.store}, {"temperature", body.value("temperature", 1.0)},
            {"text", body.value("text", Json{{"format", {{"type", "text"}}}})},
            {"tool_choice", body.value("tool_choice", Json("auto"))}, {"tools", body.value("tools", Json::array())},
            {"top_p", body.value("top_p", 1.0)}, {"truncation", "disabled"}, {"user", body.value("user", Json())},
            {"metadata", body.value("metadata", Json::object())}};
  return r;
}

Json message_item(std::string id, const std::string& text, const char* status) {
  return {{"type", "message"}, {"id", std::move(id)}, {"status", status}, {"role", "assistant"},
          {"content", Json::array({Json{{"type", "output_text"}, {"text", text}, {"annotations", Json::array()}}})}};
}

Json reasoning_item(std::string id, const std::string& text) {
  return {{"type", "reasoning"}, {"id", std::move(id)},
          {"summary", Json::array({Json{{"type", "summary_text"}, {"text", text}}})}};
}

Json call_item(std::string id, const AnsweredCall& c, const char* status) {
  return {{"type", "function_call"}, {"id", std::move(id)}, {"call_id", c.id}, {"name", c.name},
          {"arguments", c.arguments}, {"status", status}};
}

}  // namespace

std::variant<Request, openai::RequestError> read_request(const Json& body, const ItemLookup& lookup) {
  return openai::validated<Request>([&] { return to_request(body, lookup); });
}

Json assistant_messages(const ChoiceAnswer& a) {
  Json m = {{"role", "assistant"}, {"content", a.content}};
  for (const AnsweredCall& c : a.calls)
    m["tool_calls"].push_back({{"id", c.id}, {"type", "function"},
                               {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  return Json::array({std::move(m)});
}

ResponseWriter::ResponseWriter(std::string id, std::string model, int64_t created, Json echo, Done done)
    : id_(std::move(id)), model_(std::move(model)), created_(created), echo_(std::move(echo)), done_(std::move(done)) {}

Json ResponseWriter::response(const char* status, Json output, const Json& usage) const {
  Json r = {{"id", id_}, {"object", "response"}, {"created_at", created_}, {"status", status}, {"error", nullptr},
            {"incomplete_details", nullptr}, {"model", model_}, {"output", std::move(output)}, {"usage", usage}};
  if (std::string(status) == "incomplete") r["incomplete_details"] = {{"reason", "max_output_tokens"}};
  r.update(echo_);
  return r;
}

Json ResponseWriter::output_of(const ChoiceAnswer& a, bool cut) {
  Json out = Json::array();
  if (!a.reasoning.empty()) out.push_back(reasoning_item(item_id("rs"), a.reasoning));
  if (!a.content.empty() || a.calls.empty()) out.push_back(message_item(item_id("msg"), a.content, "completed"));
  for (const AnsweredCall& c : a.calls) out.push_back(call_item(item_id("fc"), c, "completed"));
  // The token limit cut the item being written, which is the last: a message
  // or a call (a thinking-only answer ends with an empty message).
  if (cut) out.back()["status"] = "incomplete";
  return out;
}

Json ResponseWriter::whole(const ChoiceAnswer& a, const AnswerEnd& end, const AnswerUsage& usage) {
  const bool cut = end.reason == AnswerEnd::Reason::kLength;
  Json r = response(cut ? "incomplete" : "completed", output_of(a, cut), usage_json(usage));
  if (done_) done_(r, a);
  return r;
}

std::string ResponseWriter::event(const char* type, Json data) {
  data["type"] = type;
  data["sequence_number"] = sequence_++;
  return fmt::format("event: {}\ndata: {}\n\n", type, openai::dump_json(data));
}

}  // namespace kvlm::responses
