// Random-weight LoRA adapters for a base model (`kvlm make-lora`), in either
// format load_lora reads (model/lora_load.h), so adapter support can be
// tested and benchmarked without a trained adapter. Unlike PEFT's
// initialisation (B = 0, an adapter that changes nothing), B is random too,
// so the adapter visibly changes the logits.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/dtype.h"
#include "model/config.h"
#include "model/lora.h"

namespace kvlm {

enum class LoraFormat {
  kPeft,  // a folder: adapter_config.json + adapter_model.safetensors (HF module names, HF Q/K row order)
  kGguf,  // llama.cpp's GGUF LoRA, as convert_lora_to_gguf.py writes it
};

struct MakeLoraOptions {
  std::string base_path;  // any model path kvlm loads (GGUF file or HF folder)
  std::string out_path;   // the folder (PEFT) or file (GGUF) to write
  LoraFormat format = LoraFormat::kPeft;
  int32_t rank = 16;
  float alpha = 32.0f;
  // "attn" (the attention targets the base supports), "all", or a comma list
  // of GGUF target names ("attn_q,ffn_down"); parse_lora_targets.
  std::string targets = "attn";
  uint64_t seed = 0;
  bool rslora = false;   // scale alpha / sqrt(rank) instead of alpha / rank
  DType dtype = DType::kF32;  // F32, F16 or BF16
  // Standard deviation of B's values (A is U(-1/sqrt(in), 1/sqrt(in))).
  float b_std = 0.02f;
};

struct MakeLoraResult {
  int64_t num_pairs = 0;
  std::vector<LoraTarget> targets;
  uint64_t num_bytes = 0;  // of the tensors as written
};

// Writes the adapter. Same options and base, same bytes. Throws
// Error(kInvalidArgument) for a bad rank, dtype or target list, and what
// opening the base throws.
MakeLoraResult make_lora(const MakeLoraOptions& options);

// "attn", "all" or a comma list -> targets in enum order. Throws
// Error(kInvalidArgument) naming a name that is not a target, or one kvlm
// does not apply on this base (lora_supported_targets), with the ones it does.
std::vector<LoraTarget> parse_lora_targets(const std::string& spec, const ModelConfig& config);

// The Hugging Face module a target of a layer is, as PEFT names it without
// its "base_model.model." prefix: "model.layers.3.self_attn.q_proj",
// GPT-2's "transformer.h.3.attn.c_attn".
std::string lora_hf_module(const ModelConfig& config, int64_t layer, LoraTarget target);

}  // namespace kvlm
