// Test helper: writes a Hugging Face checkpoint folder from a GGUF model, the
// way the published checkpoints are laid out (config.json, safetensors with
// HF's tensor names and Q/K row order, tokenizer.json, tokenizer_config.json,
// generation_config.json). Written from the published formats independently
// of model/hf_*.cpp, so that loading the folder back is a check of the loader.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "backend/dtype.h"
#include "model/gguf.h"

namespace kvlm::test {

struct HfFolderOptions {
  static HfFolderOptions shards(int n) { HfFolderOptions o; o.num_shards = n; return o; }
  static HfFolderOptions of_type(DType t) { HfFolderOptions o; o.dtype = t; return o; }
  std::optional<DType> dtype;       // F32, F16 or BF16; unset: each tensor's own float type
  int num_shards = 1;               // > 1: model-0000k-of-0000n.safetensors and the index
  bool chat_template_file = false;  // the template in chat_template.jinja, not tokenizer_config.json
};

// Writes the folder `dir` (created) for `gguf` (llama (Mixtral), qwen2, qwen3,
// their MoE kinds, phi3, gemma2 or gpt2; float tensors).
void write_hf_folder(const GgufFile& gguf, const std::string& dir, const HfFolderOptions& options = {});

// tokenizer.json for a GGUF vocabulary (SentencePiece "llama" or byte-level
// "gpt2"), as Hugging Face's converters write it.
nlohmann::json hf_tokenizer_json(const Metadata& m);
// tokenizer_config.json: BOS/EOS by text, add_bos_token, and the chat template if `with_template`.
nlohmann::json hf_tokenizer_config_json(const Metadata& m, bool with_template);

}  // namespace kvlm::test
