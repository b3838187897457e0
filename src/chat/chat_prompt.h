// From chat messages to prompt tokens: the model's chat template (or an
// override), rendered with its BOS/EOS texts, then tokenized with special
// pieces parsed — the path every chat request takes (kvlm run --chat, the
// server's /v1/chat/completions).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "common/metadata.h"
#include "tokenizer/tokenizer.h"

namespace kvlm {

// The template in `override_path` if given, else the model's
// tokenizer.chat_template. Throws Error(kInvalidArgument) when the model has
// none ("pass --chat-template-file"), Error(kNotFound) for a missing file and
// the parse error for a broken template.
std::unique_ptr<ChatTemplate> load_chat_template(const Metadata& metadata,
                                                 const std::optional<std::string>& override_path);

// Renders `messages` (an OpenAI-style array) with the tokenizer's BOS/EOS
// texts and tokenizes the result with special pieces parsed. Adds BOS as the
// vocabulary says unless the template already wrote one. Throws the
// template's own error (e.g. "System role not supported").
// The template's text for `messages`, which encode_chat tokenizes (what
// llama.cpp's /apply-template answers).
std::string render_chat(const Tokenizer& tokenizer, const ChatTemplate& tmpl, const nlohmann::ordered_json& messages,
                        bool add_generation_prompt,
                        const nlohmann::ordered_json& extra = nlohmann::ordered_json::object());
std::vector<int32_t> encode_chat(const Tokenizer& tokenizer, const ChatTemplate& tmpl,
                                 const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                 const nlohmann::ordered_json& extra = nlohmann::ordered_json::object());
// encode_chat's tokens of a text render_chat made (or of its first piece,
// tokenizer/prompt_pieces.h): BOS as the vocabulary says, one BOS at most.
std::vector<int32_t> encode_chat_text(const Tokenizer& tokenizer, std::string_view text);

}  // namespace kvlm
