#include "chat/chat_template.h"

#include <chrono>
#include <ctime>

#include "common/error.h"
#include "chat/jinja/error.h"
#include "chat/jinja/json.h"
#include "chat/jinja/lexer.h"
#include "chat/jinja/parser.h"
#include "chat/jinja/render.h"

namespace kvlm {

namespace jinja {
struct Program {
  Body body;
};
}  // namespace jinja

namespace {

std::tm current_local_time() {
  std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  localtime_r(&t, &tm);
  return tm;
}

}  // namespace

ChatTemplate::ChatTemplate(std::unique_ptr<const jinja::Program> program, std::string source)
    : program_(std::move(program)), source_(std::move(source)) {}
ChatTemplate::~ChatTemplate() = default;

std::unique_ptr<ChatTemplate> ChatTemplate::parse(std::string_view source) {
  // Hugging Face's environment: trim_blocks and lstrip_blocks on, trailing newline dropped.
  jinja::LexerOptions options;
  auto program = std::make_unique<jinja::Program>();
  program->body = jinja::Parser::parse(jinja::tokenize(source, options));
  return std::unique_ptr<ChatTemplate>(new ChatTemplate(std::move(program), std::string(source)));
}

std::string ChatTemplate::render(const ChatTemplateInputs& in) const {
  if (!in.extra.is_object()) throw_error(ErrorCode::kInvalidArgument, "chat template extra variables must be a JSON object");
  jinja::Value context = jinja::Value::make_dict();
  jinja::DictObj& vars = context.dict();
  try {
    vars.set("messages", jinja::from_json(in.messages));
    vars.set("tools", jinja::Value::none());
    vars.set("documents", jinja::Value::none());
    vars.set("add_generation_prompt", jinja::Value(in.add_generation_prompt));
    vars.set("bos_token", jinja::Value(in.bos_token));
    vars.set("eos_token", jinja::Value(in.eos_token));
    for (const auto& [key, value] : in.extra.items()) vars.set(key, jinja::from_json(value));
  } catch (const jinja::RuntimeError& e) {
    throw_error(ErrorCode::kInvalidArgument, "chat template inputs: {}", e.what());  // e.g. nested too deeply
  }

  std::optional<std::tm> fixed = in.now;
  if (fixed) {
    // Fill in the weekday and day of the year a caller setting only the date
    // leaves at 0, so %A and %j print the truth.
    std::tm normalized = *fixed;
    normalized.tm_isdst = -1;
    if (std::mktime(&normalized) != -1) {
      fixed->tm_wday = normalized.tm_wday;
      fixed->tm_yday = normalized.tm_yday;
    }
  }
  jinja::Renderer renderer([fixed] { return fixed ? *fixed : current_local_time(); });
  return renderer.render(program_->body, context);
}

}  // namespace kvlm
