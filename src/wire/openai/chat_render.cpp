#include "wire/openai/chat_render.h"

#include "chat/chat_prompt.h"
#include "chat/chat_template.h"
#include "chat/tool_prompt.h"
#include "common/error.h"

namespace kvlm {

TemplateInput template_input(const ChatTemplate& tmpl, const openai::ChatRequest& r) {
  ToolPromptMessages m = tool_prompt_messages(tmpl.source(), r.messages, r.tools,
                                              r.tool_choice.kind != openai::ToolChoice::Kind::kNone);
  return {std::move(m.messages), r.template_extra, std::move(m.without_system)};
}

std::vector<int32_t> render_chat_prompt(const Tokenizer& tok, const ChatTemplate& tmpl, const openai::ChatRequest& r) {
  const TemplateInput in = template_input(tmpl, r);
  try {
    return encode_chat(tok, tmpl, in.messages, /*add_generation_prompt=*/true, in.extra);
  } catch (const Error& e) {
    // A template that refuses a system message gets the tools described in
    // the first user message instead.
    if (!in.messages_without_system) throw;
    try {
      return encode_chat(tok, tmpl, *in.messages_without_system, /*add_generation_prompt=*/true, in.extra);
    } catch (const Error&) {
      throw e;  // the template's own words about the messages as sent
    }
  }
}

}  // namespace kvlm
