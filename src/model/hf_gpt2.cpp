// GPT-2 checkpoints (GPT2LMHeadModel): their own config fields and tensor
// names, and Conv1D weights stored [in, out], which GGUF holds as rows of
// `in` values (llama.cpp's converter transposes them too).
#include <set>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/printable.h"
#include "model/hf_config.h"

namespace kvlm {
namespace {

using Json = nlohmann::json;

const std::set<std::string>& gpt2_fields() {
  static const std::set<std::string> k = {
      "architectures", "model_type", "torch_dtype", "dtype", "transformers_version", "_name_or_path",
      "bos_token_id", "eos_token_id", "pad_token_id", "use_cache", "initializer_range", "vocab_size",
      "n_embd", "n_layer", "n_head", "n_positions", "n_ctx", "n_inner", "layer_norm_epsilon",
      "activation_function", "resid_pdrop", "embd_pdrop", "attn_pdrop", "summary_activation",
      "summary_first_dropout", "summary_proj_to_labels", "summary_type", "summary_use_proj",
      "task_specific_params", "scale_attn_weights", "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn",
      "tie_word_embeddings", "output_attentions", "output_hidden_states", "return_dict"};
  return k;
}

int64_t positive(const Json& c, const std::string& path, const char* key) {
  if (!c.contains(key) || !c[key].is_number_integer() || c[key].get<int64_t>() <= 0)
    throw_error(ErrorCode::kCorrupt, "{}: config.json needs '{}' as a positive integer", path, key);
  return c[key].get<int64_t>();
}

// A field whose only supported value is `want` (absent counts as `want`).
void only(const Json& c, const std::string& path, const char* key, const Json& want, const char* why) {
  if (c.contains(key) && !c[key].is_null() && c[key] != want)
    throw_error(ErrorCode::kUnsupported, "{}: config.json field '{}' = {} is not supported: {}", path, key,
                printable(c[key].dump(), 200), why);
}

}  // namespace

HfModelInfo read_gpt2_config(const Json& c, const std::string& path, Metadata& out) {
  for (const auto& [key, value] : c.items())
    if (!gpt2_fields().count(key))
      throw_error(ErrorCode::kUnsupported, "{}: config.json field '{}' = {} is not supported: kvlm does not know "
                  "this field", path, key, printable(value.dump(), 200));
  only(c, path, "activation_function", "gelu_new", "GPT-2 uses the tanh GELU (gelu_new)");
  only(c, path, "scale_attn_weights", true, "queries are scaled by 1/sqrt(head_dim)");
  only(c, path, "scale_attn_by_inverse_layer_idx", false, "queries are scaled by 1/sqrt(head_dim)");
  const int64_t dim = positive(c, path, "n_embd");
  const int64_t context = c.contains("n_positions") ? positive(c, path, "n_positions") : positive(c, path, "n_ctx");
  const int64_t ffn = c.contains("n_inner") && !c["n_inner"].is_null() ? positive(c, path, "n_inner") : 4 * dim;
  const double eps = c.contains("layer_norm_epsilon") && c["layer_norm_epsilon"].is_number()
                         ? c["layer_norm_epsilon"].get<double>() : 1e-5;
  out.set("general.architecture", meta_string("gpt2"));
  out.set("gpt2.context_length", meta_u32(static_cast<uint32_t>(context)));
  out.set("gpt2.embedding_length", meta_u32(static_cast<uint32_t>(dim)));
  out.set("gpt2.feed_forward_length", meta_u32(static_cast<uint32_t>(ffn)));
  out.set("gpt2.block_count", meta_u32(static_cast<uint32_t>(positive(c, path, "n_layer"))));
  HfModelInfo info;
  info.arch = "gpt2";
  info.num_heads = info.num_kv_heads = positive(c, path, "n_head");
  out.set("gpt2.attention.head_count", meta_u32(static_cast<uint32_t>(info.num_heads)));
  out.set("gpt2.attention.layer_norm_epsilon", meta_f32(static_cast<float>(eps)));
  info.tied_embeddings = c.value("tie_word_embeddings", true);
  return info;
}

std::optional<Gpt2Name> gpt2_gguf_name(std::string hf) {
  if (hf.rfind("transformer.", 0) == 0) hf = hf.substr(12);  // the prefix some checkpoints keep
  if (hf == "wte.weight") return Gpt2Name{"token_embd.weight", -1, false};
  if (hf == "wpe.weight") return Gpt2Name{"position_embd.weight", -1, false};
  if (hf == "ln_f.weight" || hf == "ln_f.bias") return Gpt2Name{"output_norm." + hf.substr(5), 1 << 30, false};
  if (hf == "lm_head.weight") return Gpt2Name{"output.weight", 1 << 30, false};
  if (hf.rfind("h.", 0) != 0) return std::nullopt;
  const size_t dot = hf.find('.', 2);
  const std::string num = hf.substr(2, dot == std::string::npos ? 0 : dot - 2);
  if (num.empty() || num.size() > 6 || num.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  const int64_t layer = std::stoll(num);
  const std::string rest = hf.substr(dot + 1);
  static const std::pair<const char*, const char*> kParts[] = {
      {"ln_1", "attn_norm"}, {"attn.c_attn", "attn_qkv"}, {"attn.c_proj", "attn_output"},
      {"ln_2", "ffn_norm"},  {"mlp.c_fc", "ffn_up"},      {"mlp.c_proj", "ffn_down"}};
  for (const auto& [part, gguf] : kParts)
    for (const char* kind : {".weight", ".bias"})
      if (rest == std::string(part) + kind)
        return Gpt2Name{"blk." + num + "." + gguf + kind, layer,
                        std::string(kind) == ".weight" && rest.rfind("ln_", 0) != 0};
  // The causal mask buffers older checkpoints keep: nothing to load.
  if (rest == "attn.bias" || rest == "attn.masked_bias") return Gpt2Name{"", layer, false};
  return std::nullopt;
}

}  // namespace kvlm
