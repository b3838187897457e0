// The prompt of one (query, document) pair for a reranker, built as
// llama-server builds it (format_prompt_rerank):
// - the model's rerank template (GGUF tokenizer.chat_template.rerank, which
//   Qwen3-Reranker conversions carry) with {query} and {document} replaced,
//   tokenized with special tokens parsed and none added;
// - without one: [BOS] query [EOS] [SEP] document [EOS], each special token
//   only where the vocabulary's add_bos / add_eos flag asks for it (and
//   SEP where tokenizer.ggml.add_sep_token does: `add_sep`; EOS falls back
//   to SEP), query and document tokenized as plain text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvlm {

class Tokenizer;

struct RerankFormat {
  std::optional<std::string> rerank_template;  // tokenizer.chat_template.rerank
  bool add_sep = false;                        // tokenizer.ggml.add_sep_token
};

std::vector<int32_t> rerank_prompt(const Tokenizer& tok, const RerankFormat& format, std::string_view query,
                                   std::string_view document);

}  // namespace kvlm
