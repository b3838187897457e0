#include "chat/chat_prompt.h"

#include "common/error.h"
#include "common/mapped_file.h"

namespace kvlm {

std::unique_ptr<ChatTemplate> load_chat_template(const Metadata& metadata,
                                                 const std::optional<std::string>& override_path) {
  if (override_path) return ChatTemplate::parse(read_file_bytes(*override_path));
  std::optional<std::string> source = metadata.get_string("tokenizer.chat_template");
  if (!source)
    throw_error(ErrorCode::kInvalidArgument,
                "this model has no chat template (tokenizer.chat_template); pass --chat-template-file");
  return ChatTemplate::parse(*source);
}

std::string render_chat(const Tokenizer& tokenizer, const ChatTemplate& tmpl, const nlohmann::ordered_json& messages,
                        bool add_generation_prompt, const nlohmann::ordered_json& extra) {
  ChatTemplateInputs in;
  in.messages = messages;
  in.add_generation_prompt = add_generation_prompt;
  in.extra = extra;
  if (auto bos = tokenizer.bos_id()) in.bos_token = tokenizer.piece(*bos);
  if (auto eos = tokenizer.eos_id()) in.eos_token = tokenizer.piece(*eos);
  return tmpl.render(in);
}

std::vector<int32_t> encode_chat(const Tokenizer& tokenizer, const ChatTemplate& tmpl,
                                 const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                 const nlohmann::ordered_json& extra) {
  return encode_chat_text(tokenizer, render_chat(tokenizer, tmpl, messages, add_generation_prompt, extra));
}

std::vector<int32_t> encode_chat_text(const Tokenizer& tokenizer, std::string_view text) {
  std::vector<int32_t> tokens = tokenizer.encode(text, /*add_special=*/true, /*parse_special=*/true);
  // Templates that start with {{ bos_token }} and vocabularies that add BOS
  // would give two; llama.cpp warns, we keep one.
  const auto bos = tokenizer.bos_id();
  if (bos && tokens.size() >= 2 && tokens[0] == *bos && tokens[1] == *bos) tokens.erase(tokens.begin());
  return tokens;
}

}  // namespace kvlm
