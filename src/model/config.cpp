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
// Mistral files use the llama architecture name; "mistral" is accepted too.
constexpr ArchName kArchNames[] = {
    {"llama", Arch::kLlama},
    {"mistral", Arch::kLlama},
    {"qwen2", Arch::kQwen2},
    {"gpt2", Arch::kGpt2},
    {"gemma2", Arch::kGemma2},
};

int32_t positive(int64_t v, const std::string& key) {
  if (v <= 0 || v > (1 << 24)) throw_error(ErrorCode::kCorrupt, "metadata '{}' = {} is out of range", key, v);
  return static_cast<int32_t>(v);
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
  bool known = false;
  for (const auto& a : kArchNames) {
    if (c.arch_name == a.name) {
      c.arch = a.arch;
      known = true;
    }
  }
  if (!known) {
    throw_error(ErrorCode::kUnsupported, "unsupported architecture '{}' (kvlm supports: {})",
                printable(c.arch_name), fmt::join(supported_architectures(), ", "));
  }
  c.name = m.get_string("general.name").value_or("");
  const std::string p = c.arch_name + ".";
  c.dim = positive(m.require_int(p + "embedding_length"), p + "embedding_length");
  c.num_layers = positive(m.require_int(p + "block_count"), p + "block_count");
  c.num_heads = positive(m.require_int(p + "attention.head_count"), p + "attention.head_count");
  c.num_kv_heads = positive(m.get_int(p + "attention.head_count_kv").value_or(c.num_heads),
                            p + "attention.head_count_kv");
  c.ffn_dim = positive(m.require_int(p + "feed_forward_length"), p + "feed_forward_length");
  c.context_length = positive(m.get_int(p + "context_length").value_or(2048), p + "context_length");
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

  c.rope.style = (c.arch == Arch::kQwen2 || c.arch == Arch::kGemma2) ? RopeStyle::kNeox : RopeStyle::kNormal;
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
    throw_error(ErrorCode::kUnsupported, "rope scaling type '{}' is not supported (none, linear)", printable(scaling));
  }

  if (c.arch == Arch::kGemma2) {
    c.attn_softcap = static_cast<float>(m.get_float(p + "attn_logit_softcapping").value_or(50.0));
    c.final_softcap = static_cast<float>(m.get_float(p + "final_logit_softcapping").value_or(30.0));
    c.sliding_window = static_cast<int32_t>(m.get_int(p + "attention.sliding_window").value_or(4096));
  }
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
  if (arch == Arch::kGemma2)
    s += fmt::format("soft-cap: attention {} final {}  sliding window: {}\n", attn_softcap,
                     final_softcap, sliding_window);
  return s;
}

}  // namespace kvlm
