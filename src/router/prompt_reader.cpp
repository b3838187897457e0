#include "router/prompt_reader.h"

#include "chat/chat_template.h"
#include "common/error.h"
#include "tokenizer/tokenizer.h"
#include "wire/openai/chat_render.h"
#include "wire/openai/kv_chunks.h"
#include "wire/openai/protocol.h"

namespace kvlm::router {

using Json = nlohmann::ordered_json;

PromptReader::PromptReader(std::unique_ptr<Tokenizer> tokenizer, std::unique_ptr<ChatTemplate> chat_template)
    : tokenizer_(std::move(tokenizer)), chat_template_(std::move(chat_template)) {}

PromptReader::~PromptReader() = default;

std::vector<int32_t> PromptReader::chunk_prefix() const {
  if (tokenizer_->add_bos() && tokenizer_->bos_id()) return {*tokenizer_->bos_id()};
  return {};
}

PieceIds PromptReader::pieces(bool chat, const Json& body) const {
  if (!body.is_object()) return {};
  // A resumed or pre-tokenized prompt: what the worker will use as it is.
  if (const auto it = body.find("prompt_token_ids"); it != body.end() && it->is_array()) {
    std::vector<int32_t> ids;
    for (const Json& t : *it) {
      if (!t.is_number_integer()) return {};
      ids.push_back(t.get<int32_t>());
    }
    return {ids, {}};
  }
  try {
    return chat ? chat_tokens(body) : completion_tokens(body);
  } catch (const Error&) {
    return {};  // the worker refuses it too, and says why
  } catch (const nlohmann::json::exception&) {
    return {};
  }
}

PieceIds PromptReader::completion_tokens(const Json& body) const {
  // KV chunks (docs/kv-chunks.md): the prompt in pieces, as the worker
  // tokenizes it.
  if (body.contains("kv_chunks")) {
    auto parsed = openai::parse_completion_request(body);
    const auto* r = std::get_if<openai::CompletionRequest>(&parsed);
    if (!r) return {};
    return openai::completion_prompt_pieces(*tokenizer_, r->prompts.at(0), r->kv_chunks);
  }
  const auto it = body.find("prompt");
  if (it == body.end()) return {};
  const Json* p = &*it;
  // A one-element list is that prompt (as the worker reads it).
  if (p->is_array() && p->size() == 1 && !(*p)[0].is_number()) p = &(*p)[0];
  if (p->is_string())
    return {tokenizer_->encode(p->get_ref<const std::string&>(), /*add_special=*/true, /*parse_special=*/true), {}};
  std::vector<int32_t> ids;
  if (!p->is_array()) return {};
  for (const Json& t : *p) {
    if (!t.is_number_integer()) return {};
    ids.push_back(t.get<int32_t>());
  }
  return {ids, {}};
}

PieceIds PromptReader::chat_tokens(const Json& body) const {
  if (!chat_template_) return {};
  auto parsed = openai::parse_chat_prompt(body);
  if (std::holds_alternative<openai::RequestError>(parsed)) return {};
  return render_chat_prompt_pieces(*tokenizer_, *chat_template_, std::get<openai::ChatRequest>(parsed));
}

}  // namespace kvlm::router
