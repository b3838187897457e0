// Reading LoRA adapters into a LoraAdapter (model/lora.h), from either file
// format, checked against the base model they will run on:
//  - a PEFT folder: adapter_config.json + adapter_model.safetensors, tensors
//    "base_model.model.<module>.lora_A.weight" [r, in] and ".lora_B.weight"
//    [out, r], <module> a Hugging Face module name;
//  - llama.cpp's GGUF LoRA (convert_lora_to_gguf.py's output): general.type
//    "adapter", adapter.type "lora", adapter.lora.alpha, tensors
//    "blk.N.<target>.weight.lora_a" (ggml dims {in, r}) and ".lora_b" ({r, out}).
// Every pair ends up in GGUF's layout: a PEFT adapter of a llama base gets
// the Q/K row permutation the base's conversion applied (hf_checkpoint.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"
#include "model/gguf.h"
#include "model/lora.h"

namespace kvlm {

// `path` a folder: PEFT; anything else: a GGUF LoRA. The pairs' scale is
// user_scale times PEFT's lora_alpha / r (rsLoRA: / sqrt(r), rank_pattern
// and alpha_pattern applied per module), or times llama.cpp's alpha / rank
// (alpha 0 or absent: user_scale alone, as llama.cpp does). A and B are held
// in `dtype` (f32, f16 or bf16; LoraAdapter::dtype), prepared by `backend`. Throws Error:
//  - kNotFound: the path, adapter_config.json or the safetensors file is missing;
//  - kCorrupt: a malformed file, a tensor of the wrong rank (dimensions) or
//    a pair whose rank disagrees with the config, a pair given twice;
//  - kInvalidArgument: the adapter was made for another base (architecture,
//    a layer past the base's, shapes that differ from the base tensor's);
//  - kUnsupported: DoRA, a bias, another PEFT method, an empty adapter, and
//    tensors kvlm cannot apply (embeddings, the head, norms, experts, fused
//    matrices split at load, an A without its B), every one named.
// shared_ptr: the engine's adapter table and every request running with the
// adapter hold it, so an adapter unloaded mid-request outlives the request.
std::shared_ptr<const LoraAdapter> load_lora(const std::string& path, const GgufFile& base, const ModelConfig& config,
                                             const Backend& backend, float user_scale = 1.0f,
                                             DType dtype = DType::kF32);

// The targets kvlm applies an adapter to on this base: GPT-2's attn_qkv,
// attn_output, ffn_up, ffn_down; Phi-3's attn_output and ffn_down (its
// q/k/v and gate/up are fused in the file and split at load); the attention
// targets of a model with experts; the seven attention and FFN matrices of
// the other families. In enum order.
std::vector<LoraTarget> lora_supported_targets(const ModelConfig& config);

// Whether the base's Q/K rows are in GGUF's interleaved rotary order where a
// Hugging Face checkpoint has halves (llama: llama.cpp's converter and
// kvlm's HF loader permute them), so lora_B of q_proj/k_proj is permuted too.
bool lora_permutes_qk(const ModelConfig& config);

// Permutes the `rows` rows (of `cols` floats) of a Q or K matrix of
// `num_heads` heads between HF's order and GGUF's: to_gguf moves HF row
// h * head_dim + half * head_dim / 2 + i to h * head_dim + 2 * i + half;
// !to_gguf is the inverse. Precondition: rows is num_heads times an even head_dim.
void permute_qk_rows(std::vector<float>& m, int64_t rows, int64_t cols, int64_t num_heads, bool to_gguf);

}  // namespace kvlm
