#include "model/hf_config.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/printable.h"
#include "model/make_model_plan.h"

namespace kvlm {
namespace {

using Json = nlohmann::json;

struct HfArch {
  const char* hf_name;  // config.json "architectures"[0]
  const char* arch;     // general.architecture
  bool permute_qk;      // the GGUF family rotates interleaved pairs (llama.cpp permutes on conversion)
};
constexpr HfArch kArchs[] = {
    {"LlamaForCausalLM", "llama", true},    {"MistralForCausalLM", "llama", true},
    {"MixtralForCausalLM", "llama", true},  {"Qwen2ForCausalLM", "qwen2", false},
    {"Qwen3ForCausalLM", "qwen3", false},   {"Qwen2MoeForCausalLM", "qwen2moe", false},
    {"Qwen3MoeForCausalLM", "qwen3moe", false}, {"Phi3ForCausalLM", "phi3", false},
    {"Gemma2ForCausalLM", "gemma2", false},     {"GPT2LMHeadModel", "gpt2", false},
};

// Fields that change nothing in inference (training settings, bookkeeping),
// or whose value is checked where it matters. Any other field is refused.
const std::set<std::string>& known_fields() {
  static const std::set<std::string> k = {
      "architectures", "model_type", "torch_dtype", "dtype", "transformers_version", "_name_or_path",
      "bos_token_id", "eos_token_id", "pad_token_id", "use_cache", "initializer_range", "attention_dropout",
      "tie_word_embeddings", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
      "num_key_value_heads", "head_dim", "max_position_embeddings", "rms_norm_eps", "rope_theta",
      "rope_scaling", "vocab_size", "hidden_act", "attention_bias", "mlp_bias", "pretraining_tp",
      "sliding_window", "use_sliding_window", "max_window_layers", "layer_types", "num_local_experts",
      "num_experts_per_tok", "num_experts", "moe_intermediate_size", "shared_expert_intermediate_size",
      "norm_topk_prob", "decoder_sparse_step", "mlp_only_layers", "router_aux_loss_coef",
      "output_router_logits", "router_jitter_noise", "qkv_bias", "use_qk_norm", "is_decoder",
      "output_attentions", "output_hidden_states", "return_dict", "use_return_dict", "chunk_size_feed_forward",
      "keys_to_ignore_at_inference", "partial_rotary_factor", "quantization_config", "embd_pdrop", "resid_pdrop",
      "original_max_position_embeddings", "auto_map", "attn_logit_softcapping", "final_logit_softcapping",
      "query_pre_attn_scalar", "hidden_activation", "cache_implementation"};
  return k;
}

[[noreturn]] void unsupported(const std::string& path, const std::string& field, const Json& value,
                              std::string_view why) {
  throw_error(ErrorCode::kUnsupported, "{}: config.json field '{}' = {} is not supported{}{}", path, field,
              printable(value.dump(), 200), why.empty() ? "" : ": ", why);
}

int64_t require_int(const Json& c, const std::string& path, const char* key) {
  if (!c.contains(key) || !c[key].is_number_integer() || c[key].get<int64_t>() <= 0)
    throw_error(ErrorCode::kCorrupt, "{}: config.json needs '{}' as a positive integer", path, key);
  return c[key].get<int64_t>();
}

double get_float(const Json& c, const char* key, double fallback) {
  return c.contains(key) && c[key].is_number() ? c[key].get<double>() : fallback;
}

// A field whose only supported value is `want` (absent counts as `want`).
void require_value(const Json& c, const std::string& path, const char* key, const Json& want, std::string_view why) {
  if (c.contains(key) && !c[key].is_null() && c[key] != want) unsupported(path, key, c[key], why);
}

const HfArch& find_arch(const Json& c, const std::string& path) {
  if (!c.contains("architectures") || !c["architectures"].is_array() || c["architectures"].size() != 1 ||
      !c["architectures"][0].is_string())
    throw_error(ErrorCode::kCorrupt, "{}: config.json needs 'architectures' as a list of one name", path);
  const std::string name = c["architectures"][0].get<std::string>();
  for (const HfArch& a : kArchs)
    if (name == a.hf_name) return a;
  std::string names;
  for (const HfArch& a : kArchs) names += std::string(names.empty() ? "" : ", ") + a.hf_name;
  throw_error(ErrorCode::kUnsupported, "{}: config.json field 'architectures' = {} is not supported (kvlm loads {})",
              path, printable(name), names);
}

void check_features(const Json& c, const std::string& path, const std::string& arch) {
  for (const auto& [key, value] : c.items())
    if (!known_fields().count(key)) unsupported(path, key, value, "kvlm does not know this field");
  if (arch == "gemma2") {
    require_value(c, path, "hidden_act", "gelu_pytorch_tanh", "Gemma-2 uses GeGLU (gelu_pytorch_tanh)");
    require_value(c, path, "hidden_activation", "gelu_pytorch_tanh", "Gemma-2 uses GeGLU (gelu_pytorch_tanh)");
    require_value(c, path, "attention_bias", false, "its layers have no attention biases in kvlm");
  } else {
    require_value(c, path, "hidden_act", "silu", "the supported families use SwiGLU (silu)");
    // Gemma-2's own fields would change this family's forward pass.
    for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping", "query_pre_attn_scalar"})
      if (c.contains(key) && !c[key].is_null()) unsupported(path, key, c[key], "kvlm knows it for Gemma-2 only");
  }
  require_value(c, path, "mlp_bias", false, "");
  require_value(c, path, "pretraining_tp", 1, "");
  require_value(c, path, "use_sliding_window", false, "sliding-window attention is not implemented for this family");
  require_value(c, path, "partial_rotary_factor", 1.0, "");
  require_value(c, path, "decoder_sparse_step", 1, "every layer must have the same FFN kind");
  require_value(c, path, "mlp_only_layers", Json::array(), "every layer must have the same FFN kind");
  require_value(c, path, "quantization_config", nullptr, "load an unquantized checkpoint (--quantize quantizes it)");
  if (arch == "llama" || arch == "phi3")
    require_value(c, path, "attention_bias", false, "its layers have no attention biases in kvlm");
  if (c.contains("layer_types"))
    for (const Json& t : c["layer_types"])
      if (t != "full_attention") unsupported(path, "layer_types", t, "every layer must use full attention");
}

// A long-rope factor list: head_dim / 2 positive numbers.
std::vector<float> rope_factor_list(const Json& r, const std::string& path, const char* key, int64_t head_dim) {
  if (!r.contains(key) || !r[key].is_array() || std::ssize(r[key]) != head_dim / 2)
    throw_error(ErrorCode::kCorrupt, "{}: rope_scaling.{} must be a list of {} numbers", path, key, head_dim / 2);
  std::vector<float> out;
  for (const Json& v : r[key]) {
    if (!v.is_number() || !(v.get<double>() > 0))
      throw_error(ErrorCode::kCorrupt, "{}: rope_scaling.{} holds {}, not a positive number", path, key, printable(v.dump()));
    out.push_back(v.get<float>());
  }
  return out;
}

// Phi-3: its window (0: none, as Phi-4 writes it), the context its rope was
// trained on, and long-rope ("su", "longrope"): the long and short factor
// tensors and the attention factor, as llama.cpp's converter writes them.
void read_phi3(const Json& c, const std::string& path, const std::string& p, int64_t head_dim, Metadata& out,
               HfModelInfo& info) {
  const Json& w = c.contains("sliding_window") ? c["sliding_window"] : Json();
  if (!w.is_null() && !w.is_number_integer()) unsupported(path, "sliding_window", w, "a number of tokens or null");
  out.set(p + "attention.sliding_window", meta_u32(static_cast<uint32_t>(w.is_null() ? 0 : w.get<int64_t>())));
  const int64_t context = require_int(c, path, "max_position_embeddings");
  const int64_t original = c.contains("original_max_position_embeddings")
                               ? require_int(c, path, "original_max_position_embeddings") : context;
  out.set(p + "rope.scaling.original_context_length", meta_u32(static_cast<uint32_t>(original)));
  if (!c.contains("rope_scaling") || c["rope_scaling"].is_null()) return;
  const Json& r = c["rope_scaling"];
  const Json type = r.contains("rope_type") ? r["rope_type"] : r.value("type", Json("default"));
  if (type != "su" && type != "longrope")
    unsupported(path, "rope_scaling.type", type, "kvlm implements Phi-3's long-rope (su, longrope)");
  const double scale = static_cast<double>(context) / static_cast<double>(original);
  const double attn_factor = scale > 1.0 ? std::sqrt(1.0 + std::log(scale) / std::log(static_cast<double>(original))) : 1.0;
  out.set(p + "rope.scaling.attn_factor", meta_f32(static_cast<float>(attn_factor)));
  info.rope_factors.emplace_back("rope_factors_long.weight", rope_factor_list(r, path, "long_factor", head_dim));
  info.rope_factors.emplace_back("rope_factors_short.weight", rope_factor_list(r, path, "short_factor", head_dim));
}

// Gemma-2: its window (every other layer), the soft-caps, and the query
// scale kvlm implements (1 / sqrt(head_dim): the 2B and 9B models; 27B
// scales by hidden_size / heads, which is refused).
void read_gemma2(const Json& c, const std::string& path, const std::string& p, int64_t head_dim, Metadata& out) {
  out.set(p + "attention.sliding_window", meta_u32(static_cast<uint32_t>(require_int(c, path, "sliding_window"))));
  out.set(p + "attn_logit_softcapping", meta_f32(static_cast<float>(get_float(c, "attn_logit_softcapping", 50.0))));
  out.set(p + "final_logit_softcapping", meta_f32(static_cast<float>(get_float(c, "final_logit_softcapping", 30.0))));
  if (c.contains("query_pre_attn_scalar") && c["query_pre_attn_scalar"] != Json(head_dim))
    unsupported(path, "query_pre_attn_scalar", c["query_pre_attn_scalar"],
                fmt::format("kvlm scales queries by 1/sqrt(head_dim), so it must be head_dim ({})", head_dim));
}

// rope_scaling: none, linear, or llama3 (its factors become rope_freqs.weight).
void read_rope_scaling(const Json& c, const std::string& path, const std::string& p, int64_t head_dim, Metadata& out,
                       HfModelInfo& info) {
  if (!c.contains("rope_scaling") || c["rope_scaling"].is_null()) return;
  const Json& r = c["rope_scaling"];
  const Json type = r.contains("rope_type") ? r["rope_type"] : r.value("type", Json("default"));
  if (type == "default") return;
  const double factor = get_float(r, "factor", 0.0);
  if (!(factor > 0)) throw_error(ErrorCode::kCorrupt, "{}: rope_scaling.factor must be positive", path);
  if (type == "linear") {
    out.set(p + "rope.scaling.type", meta_string("linear"));
    out.set(p + "rope.scaling.factor", meta_f32(static_cast<float>(factor)));
    return;
  }
  if (type != "llama3" || info.arch != "llama")
    unsupported(path, "rope_scaling.rope_type", type, "kvlm implements default, linear and llama3 (llama)");
  ModelShape s;
  s.dim = static_cast<int32_t>(head_dim);
  s.num_heads = 1;
  s.head_dim = static_cast<int32_t>(head_dim);
  s.rope_base = static_cast<float>(get_float(c, "rope_theta", 10000.0));
  s.rope_scaling.factor = static_cast<float>(factor);
  s.rope_scaling.low_freq_factor = static_cast<float>(get_float(r, "low_freq_factor", 1.0));
  s.rope_scaling.high_freq_factor = static_cast<float>(get_float(r, "high_freq_factor", 4.0));
  s.rope_scaling.original_context = static_cast<int32_t>(get_float(r, "original_max_position_embeddings", 8192));
  if (!(s.rope_scaling.high_freq_factor > s.rope_scaling.low_freq_factor))
    throw_error(ErrorCode::kCorrupt, "{}: rope_scaling.high_freq_factor must exceed low_freq_factor", path);
  info.rope_factors.emplace_back("rope_freqs.weight", llama3_rope_factors(s));
}

void read_moe(const Json& c, const std::string& path, const std::string& p, Metadata& out) {
  const char* count_key = c.contains("num_local_experts") ? "num_local_experts" : "num_experts";
  if (!c.contains(count_key)) return;
  out.set(p + "expert_count", meta_u32(static_cast<uint32_t>(require_int(c, path, count_key))));
  out.set(p + "expert_used_count", meta_u32(static_cast<uint32_t>(require_int(c, path, "num_experts_per_tok"))));
  if (c.contains("moe_intermediate_size"))
    out.set(p + "expert_feed_forward_length",
            meta_u32(static_cast<uint32_t>(require_int(c, path, "moe_intermediate_size"))));
  if (c.contains("shared_expert_intermediate_size"))
    out.set(p + "expert_shared_feed_forward_length",
            meta_u32(static_cast<uint32_t>(require_int(c, path, "shared_expert_intermediate_size"))));
  if (c.contains("norm_topk_prob")) out.set(p + "expert_weights_norm", meta_bool(c["norm_topk_prob"].get<bool>()));
}

}  // namespace

HfModelInfo read_hf_config(const Json& c, const std::string& path, Metadata& out) {
  if (!c.is_object()) throw_error(ErrorCode::kCorrupt, "{}: config.json is not a JSON object", path);
  const HfArch& a = find_arch(c, path);
  if (std::string(a.arch) == "gpt2") return read_gpt2_config(c, path, out);
  HfModelInfo info;
  info.arch = a.arch;
  info.permute_qk = a.permute_qk;
  check_features(c, path, info.arch);
  const std::string p = info.arch + ".";
  out.set("general.architecture", meta_string(info.arch));
  const int64_t dim = require_int(c, path, "hidden_size");
  info.num_heads = require_int(c, path, "num_attention_heads");
  info.num_kv_heads = c.contains("num_key_value_heads") ? require_int(c, path, "num_key_value_heads") : info.num_heads;
  const int64_t head_dim = c.contains("head_dim") && !c["head_dim"].is_null() ? require_int(c, path, "head_dim")
                                                                               : dim / info.num_heads;
  int64_t context = require_int(c, path, "max_position_embeddings");
  // Mistral's window: kvlm has none for this family, so it keeps every
  // sequence inside the window, where full attention computes the same.
  if (c.contains("sliding_window") && c["sliding_window"].is_number_integer() && !c.contains("use_sliding_window") &&
      info.arch != "phi3" && info.arch != "gemma2")
    context = std::min(context, c["sliding_window"].get<int64_t>());
  out.set(p + "context_length", meta_u32(static_cast<uint32_t>(context)));
  out.set(p + "embedding_length", meta_u32(static_cast<uint32_t>(dim)));
  out.set(p + "block_count", meta_u32(static_cast<uint32_t>(require_int(c, path, "num_hidden_layers"))));
  out.set(p + "feed_forward_length", meta_u32(static_cast<uint32_t>(require_int(c, path, "intermediate_size"))));
  out.set(p + "attention.head_count", meta_u32(static_cast<uint32_t>(info.num_heads)));
  out.set(p + "attention.head_count_kv", meta_u32(static_cast<uint32_t>(info.num_kv_heads)));
  out.set(p + "attention.key_length", meta_u32(static_cast<uint32_t>(head_dim)));
  out.set(p + "attention.value_length", meta_u32(static_cast<uint32_t>(head_dim)));
  out.set(p + "attention.layer_norm_rms_epsilon", meta_f32(static_cast<float>(get_float(c, "rms_norm_eps", 1e-6))));
  out.set(p + "rope.freq_base", meta_f32(static_cast<float>(get_float(c, "rope_theta", 10000.0))));
  out.set(p + "rope.dimension_count", meta_u32(static_cast<uint32_t>(head_dim)));
  if (info.arch == "phi3") {
    read_phi3(c, path, p, head_dim, out, info);
  } else if (info.arch == "gemma2") {
    read_gemma2(c, path, p, head_dim, out);
    read_rope_scaling(c, path, p, head_dim, out, info);
    info.norm_plus_one = true;
  } else {
    read_rope_scaling(c, path, p, head_dim, out, info);
  }
  read_moe(c, path, p, out);
  // Gemma-2 ties its head to the embeddings unless it says otherwise.
  info.tied_embeddings = c.value("tie_word_embeddings", info.arch == "gemma2");
  return info;
}

}  // namespace kvlm
