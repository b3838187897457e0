#include "model/config.h"

#include <fmt/format.h>

#include "common/error.h"
#include "common/printable.h"

namespace kvlm {
namespace {

struct ArchName {
  const char* name;
  Arch arch;
};
// Mistral and Mixtral files use the llama architecture name; "mistral" is
// accepted too. The names are llama.cpp's (general.architecture).
constexpr ArchName kArchNames[] = {
    {"llama", Arch::kLlama},   {"mistral", Arch::kLlama},     {"qwen2", Arch::kQwen2},
    {"qwen2moe", Arch::kQwen2Moe}, {"qwen3", Arch::kQwen3},   {"qwen3moe", Arch::kQwen3Moe},
    {"phi3", Arch::kPhi3},     {"gpt2", Arch::kGpt2},         {"gemma2", Arch::kGemma2},
};

int32_t positive(int64_t v, const std::string& key) {
  if (v <= 0 || v > (1 << 24)) throw_error(ErrorCode::kCorrupt, "metadata '{}' = {} is out of range", key, v);
  return static_cast<int32_t>(v);
}

Arch arch_from_name(const std::string& name) {
  for (const auto& a : kArchNames)
    if (name == a.name) return a.arch;
  throw_error(ErrorCode::kUnsupported, "unsupported architecture '{}' (kvlm supports: {})", printable(name),
              fmt::join(supported_architectures(), ", "));
}

bool is_moe_family(Arch a) { return a == Arch::kQwen2Moe || a == Arch::kQwen3Moe; }

// Rotary embedding style, base and scaling. llama3 scaling and Phi-3's
// long-rope come as factor tensors (rope_freqs, rope_factors_long/short),
// which the model loads; only their scalars are read here.
void read_rope(const Metadata& m, const std::string& p, ModelConfig& c) {
  const bool neox = c.arch != Arch::kLlama && c.arch != Arch::kGpt2;
  c.rope.style = neox ? RopeStyle::kNeox : RopeStyle::kNormal;
  c.rope.rot_dim = static_cast<int32_t>(m.get_int(p + "rope.dimension_count").value_or(c.head_dim));
  if (c.rope.rot_dim <= 0 || c.rope.rot_dim > c.head_dim || c.rope.rot_dim % 2 != 0)
    throw_error(ErrorCode::kCorrupt, "rope.dimension_count {} is invalid for head size {}", c.rope.rot_dim, c.head_dim);
  c.rope.freq_base = static_cast<float>(m.get_float(p + "rope.freq_base").value_or(10000.0));
  std::string scaling = m.get_string(p + "rope.scaling.type").value_or("none");
  if (scaling == "linear") {
    double factor = m.get_float(p + "rope.scaling.factor").value_or(1.0);
    if (factor <= 0) throw_error(ErrorCode::kCorrupt, "rope.scaling.factor {} must be positive", factor);
    c.rope.freq_scale = static_cast<float>(1.0 / factor);
  } else if (scaling != "none") {
    throw_error(ErrorCode::kUnsupported, "{}rope.scaling.type '{}' is not supported (none, linear)", p,
                printable(scaling));
  }
  const double attn_factor = m.get_float(p + "rope.scaling.attn_factor").value_or(1.0);
  if (!(attn_factor > 0.0)) throw_error(ErrorCode::kCorrupt, "rope.scaling.attn_factor {} must be positive", attn_factor);
  c.rope.attn_factor = static_cast<float>(attn_factor);
  c.rope_original_context = static_cast<int32_t>(m.get_int(p + "rope.scaling.original_context_length").value_or(0));
  if (c.rope_original_context < 0)
    throw_error(ErrorCode::kCorrupt, "rope.scaling.original_context_length {} is negative", c.rope_original_context);
}

// Experts: Mixtral (llama with expert_count), Qwen2-MoE and Qwen3-MoE. Keys
// of routing variants kvlm does not implement are refused by name.
void read_moe(const Metadata& m, const std::string& p, ModelConfig& c) {
  const int64_t experts = m.get_int(p + "expert_count").value_or(0);
  if (experts == 0 && !is_moe_family(c.arch)) return;
  if (c.arch != Arch::kLlama && !is_moe_family(c.arch))
    throw_error(ErrorCode::kUnsupported, "{}expert_count {}: experts are not supported for architecture '{}'", p,
                experts, c.arch_name);
  MoeConfig& e = c.moe;
  e.num_experts = positive(m.require_int(p + "expert_count"), p + "expert_count");
  e.num_experts_used = positive(m.require_int(p + "expert_used_count"), p + "expert_used_count");
  if (e.num_experts_used > e.num_experts)
    throw_error(ErrorCode::kCorrupt, "expert_used_count {} exceeds expert_count {}", e.num_experts_used, e.num_experts);
  // Mixtral's experts are feed_forward_length wide; the Qwen MoEs say so apart.
  const int64_t own = m.get_int(p + "expert_feed_forward_length").value_or(c.ffn_dim / e.num_experts_used);
  e.expert_ffn_dim = c.arch == Arch::kLlama ? c.ffn_dim : positive(own, p + "expert_feed_forward_length");
  if (c.arch == Arch::kQwen2Moe)
    e.shared_ffn_dim = positive(m.get_int(p + "expert_shared_feed_forward_length").value_or(c.ffn_dim),
                                p + "expert_shared_feed_forward_length");
  e.normalize_weights = m.get_bool(p + "expert_weights_norm").value_or(c.arch != Arch::kQwen2Moe);
  // llama.cpp's gating enum: 1 softmax, 2 sigmoid (DeepSeek-V3).
  if (auto gating = m.get_int(p + "expert_gating_func"); gating && *gating != 1)
    throw_error(ErrorCode::kUnsupported, "{}expert_gating_func {} is not supported (softmax routing only)", p, *gating);
  if (auto scale = m.get_float(p + "expert_weights_scale"); scale && *scale != 1.0)
    throw_error(ErrorCode::kUnsupported, "{}expert_weights_scale {} is not supported", p, *scale);
}

// Phi-3's window is required; files converted before the key existed get
// llama.cpp's defaults for the published shapes (mini/medium 4k: 2047).
int32_t phi3_sliding_window(const Metadata& m, const std::string& p, const ModelConfig& c) {
  if (auto w = m.get_int(p + "attention.sliding_window")) {
    if (*w < 0 || *w > (int64_t{1} << 30)) throw_error(ErrorCode::kCorrupt, "attention.sliding_window {} is out of range", *w);
    return static_cast<int32_t>(*w);
  }
  if ((c.num_layers == 32 || c.num_layers == 40) && c.context_length == 4096) return 2047;
  if (c.num_layers == 32 && c.num_kv_heads == 32 && c.context_length == 131072) return 262144;
  if (c.num_layers == 40 && c.context_length == 131072) return 131072;
  throw_error(ErrorCode::kCorrupt, "missing metadata key '{}attention.sliding_window' (Phi-3 needs it; 0 = none)", p);
}

}  // namespace

const std::vector<std::string>& supported_architectures() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& a : kArchNames) v.emplace_back(a.name);
    return v;
  }();
  return names;
}

ModelConfig ModelConfig::from_metadata(const Metadata& m) {
  ModelConfig c;
  c.arch_name = m.require_string("general.architecture");
  c.arch = arch_from_name(c.arch_name);
  c.name = m.get_string("general.name").value_or("");
  const std::string p = c.arch_name + ".";
  c.dim = positive(m.require_int(p + "embedding_length"), p + "embedding_length");
  c.num_layers = positive(m.require_int(p + "block_count"), p + "block_count");
  c.num_heads = positive(m.require_int(p + "attention.head_count"), p + "attention.head_count");
  c.num_kv_heads = positive(m.get_int(p + "attention.head_count_kv").value_or(c.num_heads),
                            p + "attention.head_count_kv");
  c.ffn_dim = positive(m.require_int(p + "feed_forward_length"), p + "feed_forward_length");
  c.context_length = positive(m.get_int(p + "context_length").value_or(2048), p + "context_length");
  c.pooling_type = static_cast<int32_t>(m.get_int(p + "pooling_type").value_or(-1));
  if (c.num_heads % c.num_kv_heads != 0)
    throw_error(ErrorCode::kCorrupt, "head_count {} is not a multiple of head_count_kv {}",
                c.num_heads, c.num_kv_heads);
  c.head_dim = positive(m.get_int(p + "attention.key_length").value_or(c.dim / c.num_heads),
                        p + "attention.key_length");
  if (auto vl = m.get_int(p + "attention.value_length"); vl && *vl != c.head_dim)
    throw_error(ErrorCode::kUnsupported, "value_length {} != key_length {} is not supported", *vl, c.head_dim);

  const bool layer_norm = c.arch == Arch::kGpt2;
  c.norm_eps = static_cast<float>(
      m.get_float(p + (layer_norm ? "attention.layer_norm_epsilon" : "attention.layer_norm_rms_epsilon"))
          .value_or(1e-5));
  read_rope(m, p, c);
  read_moe(m, p, c);

  if (c.arch == Arch::kGemma2) {
    c.attn_softcap = static_cast<float>(m.get_float(p + "attn_logit_softcapping").value_or(50.0));
    c.final_softcap = static_cast<float>(m.get_float(p + "final_logit_softcapping").value_or(30.0));
    c.sliding_window = static_cast<int32_t>(m.get_int(p + "attention.sliding_window").value_or(4096));
  }
  if (c.arch == Arch::kPhi3) c.sliding_window = phi3_sliding_window(m, p, c);
  if (auto tokens = m.find("tokenizer.ggml.tokens")) c.vocab_size = static_cast<int32_t>(tokens->as_array("tokenizer.ggml.tokens").size());
  return c;
}

std::string ModelConfig::describe() const {
  std::string s;
  s += fmt::format("architecture: {}{}\n", arch_name, name.empty() ? "" : " (" + name + ")");
  s += fmt::format("vocab: {}  dim: {}  layers: {}  heads: {} (kv {})  head_dim: {}  ffn: {}\n",
                   vocab_size, dim, num_layers, num_heads, num_kv_heads, head_dim, ffn_dim);
  s += fmt::format("context: {}  norm eps: {}\n", context_length, norm_eps);
  if (arch != Arch::kGpt2)
    s += fmt::format("rope: {} dims {}  base {}  scale {}\n",
                     rope.style == RopeStyle::kNeox ? "neox" : "normal", rope.rot_dim, rope.freq_base,
                     rope.freq_scale);
  if (rope_original_context > 0 || rope.attn_factor != 1.f)
    s += fmt::format("rope scaling: original context {}  attn factor {}\n", rope_original_context, rope.attn_factor);
  if (moe.enabled())
    s += fmt::format("experts: {} (top {}, {})  expert ffn: {}{}\n", moe.num_experts, moe.num_experts_used,
                     moe.normalize_weights ? "normalized" : "softmax weights", moe.expert_ffn_dim,
                     moe.shared_ffn_dim > 0 ? fmt::format("  shared expert ffn: {}", moe.shared_ffn_dim) : "");
  if (arch == Arch::kGemma2)
    s += fmt::format("soft-cap: attention {} final {}  sliding window: {}\n", attn_softcap,
                     final_softcap, sliding_window);
  if (arch == Arch::kPhi3) s += fmt::format("sliding window: {}\n", sliding_window);
  return s;
}

}  // namespace kvlm
