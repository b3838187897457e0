// A Hugging Face config.json read into the GGUF metadata kvlm's loaders take
// ("{arch}.*" keys, llama.cpp's names), so a checkpoint folder and the GGUF
// converted from it configure the same model.
#pragma once

#include <string>
#include <optional>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/metadata.h"

namespace kvlm {

// What the tensor mapping needs to know besides the metadata.
struct HfModelInfo {
  std::string arch;              // general.architecture: "llama", "qwen2", ...
  bool permute_qk = false;       // llama: HF's rotate-half Q/K rows -> GGUF's interleaved pairs
  bool tied_embeddings = false;  // tie_word_embeddings: no lm_head.weight
  // Gemma-2: HF scales by (1 + w) where GGUF stores the sum (llama.cpp's
  // converter adds 1 to every norm weight).
  bool norm_plus_one = false;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  // Rope scaling's per-frequency factors, stored as F32 tensors as llama.cpp's
  // converter writes them (head_dim / 2 values each): llama3's
  // rope_freqs.weight, Phi-3 long-rope's rope_factors_long/short.weight.
  std::vector<std::pair<std::string, std::vector<float>>> rope_factors;
};

// Adds the model's hyper-parameters to `out` from `config` (config.json of
// `path`). Throws Error(kUnsupported) naming the field for an architecture,
// a feature or a value kvlm does not implement, and for any field it does not
// know (a checkpoint is refused rather than loaded as a different model);
// Error(kCorrupt) for a missing or mistyped required field.
HfModelInfo read_hf_config(const nlohmann::json& config, const std::string& path, Metadata& out);

// hf_gpt2.cpp: GPT2LMHeadModel's config (read_hf_config hands it over), and
// its tensor names: the GGUF name ("" for a mask buffer with nothing to
// load), the layer (for the order), and whether it is a Conv1D weight
// stored [in, out] that GGUF holds transposed. nullopt: not GPT-2's.
HfModelInfo read_gpt2_config(const nlohmann::json& config, const std::string& path, Metadata& out);
struct Gpt2Name {
  std::string name;
  int64_t layer = -1;
  bool transpose = false;
};
std::optional<Gpt2Name> gpt2_gguf_name(std::string hf);

// hf_checkpoint.cpp: a llama-style family's HF tensor name as GGUF names it
// ("model.layers.3.self_attn.q_proj.weight" -> "blk.3.attn_q.weight"), with
// its layer (-1 before the layers, 1 << 30 after) and, for one expert of a
// stack, the expert (else -1). `arch` is general.architecture. nullopt: not a
// tensor of these families. LoRA adapters name their modules the same way.
struct HfGgufName {
  std::string name;
  int64_t layer = -1;
  int64_t expert = -1;
};
std::optional<HfGgufName> hf_gguf_name(const std::string& hf, const std::string& arch);

}  // namespace kvlm
