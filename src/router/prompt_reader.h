// What a request's prompt is, as a worker will compute it: the tokens of a
// completions prompt, or of chat messages rendered through the model's chat
// template (with tools as the worker renders them), and the cache salt's
// key. The router loads the model file for its tokenizer and template only,
// never its weights; without one, prompts are unknown and the kv-aware
// policy has nothing to match.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/tool_calls.h"
#include "tokenizer/prompt_pieces.h"

namespace kvlm {
class ChatTemplate;
class Tokenizer;
}  // namespace kvlm

namespace kvlm::router {

class PromptReader {
 public:
  // `chat_template` may be null (the model has none: chat prompts unknown).
  PromptReader(std::unique_ptr<Tokenizer> tokenizer, std::unique_ptr<ChatTemplate> chat_template);
  ~PromptReader();

  // The prompt's token ids, or empty when they cannot be told (a request the
  // worker will refuse, a list of prompts): then the worker's answer says why.
  std::vector<int32_t> tokens(bool chat, const nlohmann::ordered_json& body) const { return pieces(chat, body).ids; }
  // The same, with the spans of its KV chunks (docs/kv-chunks.md) as the
  // worker marks them (not those --kv-chunks-auto adds).
  PieceIds pieces(bool chat, const nlohmann::ordered_json& body) const;
  // The prefix of a chunk's standalone prompt on the workers (BOS, or none).
  std::vector<int32_t> chunk_prefix() const;
  const Tokenizer& tokenizer() const { return *tokenizer_; }

 private:
  PieceIds completion_tokens(const nlohmann::ordered_json& body) const;
  PieceIds chat_tokens(const nlohmann::ordered_json& body) const;

  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ChatTemplate> chat_template_;
};

}  // namespace kvlm::router
