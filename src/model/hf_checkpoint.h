// A Hugging Face checkpoint folder as the GGUF llama.cpp's converter would
// write from it, built in memory: config.json and the tokenizer files become
// metadata (hf_config.h, hf_tokenizer.h), the safetensors tensors get GGUF's
// names and are used in place from their mappings. Only what GGUF stores
// differently is copied: llama's Q/K rows (HF orders each head's rotary
// pairs as two halves, GGUF interleaves them) and llama3's rope factors,
// which GGUF keeps as a tensor. Experts stay one mapping slice each.
//
// Layout read: config.json, tokenizer.json (+ tokenizer_config.json,
// chat_template.jinja, generation_config.json), and model.safetensors or
// model.safetensors.index.json with its shards.
#pragma once

#include <memory>
#include <string>

#include "model/gguf.h"

namespace kvlm {

// Throws Error(kNotFound) for a missing required file, Error(kUnsupported)
// naming the field or tensor kvlm does not implement, Error(kCorrupt) for a
// malformed file or a tensor missing, duplicated or of the wrong shape.
std::unique_ptr<GgufFile> open_hf_checkpoint(const std::string& dir);

// A model path as the commands take it: a folder is a Hugging Face
// checkpoint, anything else a GGUF file.
std::unique_ptr<GgufFile> open_model_file(const std::string& path);

}  // namespace kvlm
