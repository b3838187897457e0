// A chat request's prompt as kvlm serve renders it: the messages and tools
// through the chat template (tools described in a system prompt for a
// template that does not render them), then tokenized. kvlm router renders
// with the same function to know which KV blocks a request will need.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/prompt_pieces.h"
#include "wire/openai/protocol.h"

namespace kvlm {

class ChatTemplate;
class Tokenizer;

// The messages and extra variables the template renders for request `r`:
// tool calls' arguments as objects (chat/tool_prompt.h), and, when the
// template does not render tools and tool_choice is not none, the tools
// described in a system prompt.
struct TemplateInput {
  openai::Json messages;
  openai::Json extra;
  // The description goes into the first user message instead of a system
  // message (for templates that refuse a system role): the fallback to try.
  std::optional<openai::Json> messages_without_system;
};
TemplateInput template_input(const ChatTemplate& tmpl, const openai::ChatRequest& r);

// The prompt's token ids (with the generation prompt). Throws Error with the
// template's own words when it refuses the messages (e.g. "System role not
// supported"), after trying the tools in the first user message.
std::vector<int32_t> render_chat_prompt(const Tokenizer& tok, const ChatTemplate& tmpl, const openai::ChatRequest& r);
// The same prompt with its KV chunks (r.kv_chunks, docs/kv-chunks.md): each
// chunk's text is found in the rendered text, in order (find_in_order; one
// not found is left out), and the text tokenized in pieces around them
// (encode_in_pieces), so each chunk's ids are its text's own. Without
// chunks, or with none found: render_chat_prompt's ids and no spans.
PieceIds render_chat_prompt_pieces(const Tokenizer& tok, const ChatTemplate& tmpl, const openai::ChatRequest& r);
// The prompt's text, which render_chat_prompt tokenizes (/apply-template).
std::string render_chat_prompt_text(const Tokenizer& tok, const ChatTemplate& tmpl, const openai::ChatRequest& r);

}  // namespace kvlm
