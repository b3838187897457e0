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

namespace {

// `render(messages)` over the template's input for `r`: a template that
// refuses a system message gets the tools described in the first user
// message instead; if it refuses that too, its own words about the
// messages as sent are thrown.
template <typename Render>
auto with_tool_fallback(const ChatTemplate& tmpl, const openai::ChatRequest& r, Render&& render) {
  const TemplateInput in = template_input(tmpl, r);
  try {
    return render(in.messages, in.extra);
  } catch (const Error& e) {
    if (!in.messages_without_system) throw;
    try {
      return render(*in.messages_without_system, in.extra);
    } catch (const Error&) {
      throw e;
    }
  }
}

}  // namespace

std::vector<int32_t> render_chat_prompt(const Tokenizer& tok, const ChatTemplate& tmpl, const openai::ChatRequest& r) {
  return render_chat_prompt_pieces(tok, tmpl, r).ids;
}

PieceIds render_chat_prompt_pieces(const Tokenizer& tok, const ChatTemplate& tmpl, const openai::ChatRequest& r) {
  if (r.kv_chunks.empty()) {
    return {with_tool_fallback(tmpl, r, [&](const openai::Json& messages, const openai::Json& extra) {
              return encode_chat(tok, tmpl, messages, /*add_generation_prompt=*/true, extra);
            }),
            {}};
  }
  const std::string text = render_chat_prompt_text(tok, tmpl, r);
  std::vector<std::string> texts;
  texts.reserve(r.kv_chunks.size());
  for (const openai::ChatRequest::KvChunk& c : r.kv_chunks) texts.push_back(c.text);
  const std::vector<ByteSpan> spans = find_in_order(text, texts);
  return encode_in_pieces(tok, text, spans, [&](std::string_view first) { return encode_chat_text(tok, first); });
}

std::string render_chat_prompt_text(const Tokenizer& tok, const ChatTemplate& tmpl, const openai::ChatRequest& r) {
  return with_tool_fallback(tmpl, r, [&](const openai::Json& messages, const openai::Json& extra) {
    return render_chat(tok, tmpl, messages, /*add_generation_prompt=*/true, extra);
  });
}

}  // namespace kvlm
