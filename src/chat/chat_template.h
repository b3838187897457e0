// Chat templates: turn OpenAI-style `messages` into the exact prompt a model
// expects by rendering the model's `tokenizer.chat_template` (Jinja2 source
// from its GGUF metadata) with kvlm's own Jinja interpreter (chat/jinja/).
//
// Rendering matches Hugging Face's apply_chat_template, which runs Jinja2's
// ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks on, loop
// controls (break/continue), the `raise_exception(msg)` and
// `strftime_now(fmt)` globals and its own `tojson` (Python json.dumps:
// ensure_ascii=False, keys in insertion order, no HTML escaping). So, as
// there: `tools` and `documents` are none unless given; Undefined is Jinja2's
// default (prints "", but `missing.attr` or `missing + 1` is an error);
// methods that modify a list or dict (append, update...) are refused.
// Not supported: {% include %}/{% extends %}/{% block %} (no loader), `for
// ... recursive`, and integers beyond 64 bits (an error, not a wraparound).
//
//   auto tmpl = ChatTemplate::parse(source);            // throws on a syntax error
//   ChatTemplateInputs in;
//   in.messages = nlohmann::ordered_json::parse(body)["messages"];
//   in.add_generation_prompt = true;
//   std::string prompt = tmpl->render(in);              // throws on a template error
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace kvlm {

namespace jinja {
struct Program;
}

struct ChatTemplateInputs {
  // An array of {role, content, ...} objects. ordered_json keeps each
  // object's key order, which templates can observe (`tojson`, `.items()`).
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  bool add_generation_prompt = false;
  std::string bos_token, eos_token;
  // More template variables (tools, documents, enable_thinking, ...); they
  // override the ones above when names collide.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  // The local date and time strftime_now() formats; unset means the current
  // local time. Tests set it to render a fixed date.
  std::optional<std::tm> now;
};

class ChatTemplate {
 public:
  // Throws Error(kInvalidArgument) "template syntax error at line L, column C: ..."
  static std::unique_ptr<ChatTemplate> parse(std::string_view source);
  ~ChatTemplate();

  // Thread-safe: a parsed template is immutable, each call renders with its own state.
  // Throws Error(kInvalidArgument) with exactly the template's message when it calls
  // raise_exception(message) (e.g. "System role not supported"), or with
  // "template error at line L, column C: ..." when rendering fails otherwise
  // (an undefined variable used in arithmetic, a type error). `extra` must be an object.
  std::string render(const ChatTemplateInputs& in) const;

  // The Jinja source it was parsed from (tool_calls.h reads the format off it).
  const std::string& source() const { return source_; }

 private:
  ChatTemplate(std::unique_ptr<const jinja::Program> program, std::string source);
  std::unique_ptr<const jinja::Program> program_;
  std::string source_;
};

}  // namespace kvlm
