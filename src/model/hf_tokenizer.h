// A Hugging Face tokenizer (tokenizer.json, tokenizer_config.json,
// chat_template.jinja, generation_config.json) read into the GGUF
// tokenizer.* keys the kvlm tokenizer takes, as llama.cpp's converter writes
// them. Two pipelines are understood:
//   byte-level BPE (GPT-2, Llama-3, Qwen): a ByteLevel pre-tokenizer, alone or
//     after Split expressions; the expressions name one of the pre-tokenizer
//     types kvlm implements (tokenizer/pre_types.h) -> tokenizer.ggml.model "gpt2";
//   SentencePiece-style BPE (Llama-2, Mistral): byte_fallback, spaces made
//     "▁" by a Replace normalizer or a Metaspace pre-tokenizer, optionally a
//     "▁" prepended -> "llama", with scores ordered as the merges are.
// Anything else (Unigram, WordPiece, other normalizers or pre-tokenizers,
// an expression no known type uses) is refused naming the field.
#pragma once

#include <string>

#include "common/metadata.h"

namespace kvlm {

// Adds tokenizer.* (and the chat template, end tokens and default sampling
// of generation_config.json) for the checkpoint folder `dir` to `out`.
// `config_eos_id`/`config_bos_id`: config.json's ids, used when the tokenizer
// files name none (-1: none). Throws Error(kNotFound) without tokenizer.json,
// Error(kUnsupported) naming the field for a pipeline kvlm does not
// implement, Error(kCorrupt) for malformed files.
void read_hf_tokenizer(const std::string& dir, int64_t config_bos_id, int64_t config_eos_id, Metadata& out);

}  // namespace kvlm
