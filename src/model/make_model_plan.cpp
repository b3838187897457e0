#include "model/make_model_plan.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "common/assert.h"
#include "common/error.h"
#include "model/gguf.h"

namespace kvlm {
namespace {

const char* const kArchs = "llama, qwen2, qwen2moe, qwen3, qwen3moe, phi3";

bool has_experts_family(const std::string& a) { return a == "qwen2moe" || a == "qwen3moe"; }
bool is_qwen3(const std::string& a) { return a == "qwen3" || a == "qwen3moe"; }

// llama.cpp's general.file_type (enum llama_ftype) for a file mostly of `t`.
uint32_t file_type(DType t) {
  switch (t) {
    case DType::kF32: return 0;
    case DType::kF16: return 1;
    case DType::kQ4_0: return 2;
    case DType::kQ8_0: return 7;
    case DType::kQ4_K: return 14;  // Q4_K_S: every matrix Q4_K
    case DType::kQ6_K: return 18;
    case DType::kBF16: return 32;
    default: return 0;
  }
}

// The type a matrix with rows of `n` values gets when `want` does not divide
// them, in the spirit of llama-quantize's fallbacks.
DType fitting_type(DType want, int64_t n) {
  auto fits = [n](DType t) { return n % dtype_info(t).block_size == 0; };
  if (fits(want)) return want;
  if (want == DType::kQ4_K && fits(DType::kQ4_0)) return DType::kQ4_0;
  if ((want == DType::kQ6_K || want == DType::kQ8_0) && fits(DType::kQ8_0)) return DType::kQ8_0;
  return DType::kF16;
}

void check_sizes(const ModelShape& s) {
  auto positive = [](const char* flag, int64_t v) {
    if (v <= 0 || v > (1 << 24)) throw_error(ErrorCode::kInvalidArgument, "{} {} must be in 1..16777216", flag, v);
  };
  positive("--dim", s.dim);
  positive("--layers", s.num_layers);
  positive("--heads", s.num_heads);
  positive("--kv-heads", s.num_kv_heads);
  positive("--ffn", s.ffn_dim);
  positive("--ctx", s.context_length);
  if (s.vocab_size) positive("--vocab", *s.vocab_size);
  if (s.head_dim > 0 && s.head_dim % 2 != 0)
    throw_error(ErrorCode::kInvalidArgument, "--head-dim {} must be even", s.head_dim);
  if (s.head_dim == 0 && (s.dim % s.num_heads != 0 || (s.dim / s.num_heads) % 2 != 0))
    throw_error(ErrorCode::kInvalidArgument, "--dim {} must be --heads {} times an even head size", s.dim, s.num_heads);
  if (s.num_heads % s.num_kv_heads != 0)
    throw_error(ErrorCode::kInvalidArgument, "--heads {} must be a multiple of --kv-heads {}", s.num_heads, s.num_kv_heads);
  if (!(s.rope_base > 0.0f)) throw_error(ErrorCode::kInvalidArgument, "--rope-base {} must be positive", s.rope_base);
}

void check_experts(const ModelShape& s) {
  const bool moe_family = has_experts_family(s.arch);
  if (s.num_experts == 0) {
    if (moe_family) throw_error(ErrorCode::kInvalidArgument, "--arch {} needs --experts and --experts-used", s.arch);
    return;
  }
  if (s.arch != "llama" && !moe_family)
    throw_error(ErrorCode::kInvalidArgument, "--experts: --arch {} has no experts (llama, qwen2moe, qwen3moe do)", s.arch);
  if (s.num_experts < 0 || s.num_experts > 256 || s.num_experts_used <= 0 || s.num_experts_used > s.num_experts)
    throw_error(ErrorCode::kInvalidArgument, "--experts {} must be in 1..256 and --experts-used {} in 1..--experts",
                s.num_experts, s.num_experts_used);
  if (moe_family && s.expert_ffn_dim <= 0)
    throw_error(ErrorCode::kInvalidArgument, "--arch {} needs --expert-ffn", s.arch);
  if (s.arch == "llama" && s.expert_ffn_dim != 0 && s.expert_ffn_dim != s.ffn_dim)
    throw_error(ErrorCode::kInvalidArgument, "Mixtral's experts are --ffn wide; --expert-ffn {} differs", s.expert_ffn_dim);
  if ((s.shared_expert_ffn_dim > 0) != (s.arch == "qwen2moe"))
    throw_error(ErrorCode::kInvalidArgument, "a shared expert (--shared-expert-ffn) is qwen2moe's, and it needs one");
}

void check_family(const ModelShape& s) {
  const RopeScalingShape& r = s.rope_scaling;
  if (r.type != "none" && r.type != "llama3" && r.type != "longrope")
    throw_error(ErrorCode::kInvalidArgument, "--rope-scaling '{}' is not one of none, llama3, longrope", r.type);
  if (r.type == "llama3" && s.arch != "llama")
    throw_error(ErrorCode::kInvalidArgument, "--rope-scaling llama3 is for --arch llama");
  if (r.type == "longrope" && s.arch != "phi3")
    throw_error(ErrorCode::kInvalidArgument, "--rope-scaling longrope is for --arch phi3");
  if (r.type == "llama3" && (r.original_context <= 0 || !(r.factor >= 1.0f) ||
                             !(r.high_freq_factor > r.low_freq_factor) || !(r.low_freq_factor > 0.0f)))
    throw_error(ErrorCode::kInvalidArgument,
                "llama3 rope scaling needs --rope-original-ctx > 0, --rope-factor >= 1 and "
                "0 < --rope-low-freq-factor < --rope-high-freq-factor");
  if (r.type == "longrope" && (r.original_context <= 0 || r.original_context >= s.context_length))
    throw_error(ErrorCode::kInvalidArgument, "longrope needs 0 < --rope-original-ctx {} < --ctx {}", r.original_context,
                s.context_length);
  if (s.sliding_window != 0 && s.arch != "phi3")
    throw_error(ErrorCode::kInvalidArgument, "--sliding-window is for --arch phi3");
  if (s.rank_head && s.arch != "qwen3")
    throw_error(ErrorCode::kInvalidArgument, "--pooling rank is for --arch qwen3 (llama.cpp ranks no other decoder)");
  // llama.cpp reads these families' output.weight and never falls back to the embeddings.
  if (s.tied_embeddings && (s.arch == "phi3" || s.arch == "qwen2moe"))
    throw_error(ErrorCode::kInvalidArgument, "--arch {} has an output.weight of its own: drop --tied", s.arch);
}

// Phi-3 long-rope's factors: real checkpoints hold values near 1 for the fast
// pairs, growing for the slow ones; these follow that shape (short: 1 to 1.1;
// long: 1 to twice the context stretch).
void longrope_factors(const ModelShape& s, std::vector<float>& long_f, std::vector<float>& short_f) {
  const int32_t n = s.head_size() / 2;
  const float stretch = static_cast<float>(s.context_length) / static_cast<float>(s.rope_scaling.original_context);
  for (int32_t i = 0; i < n; ++i) {
    const float u = n > 1 ? static_cast<float>(i) / static_cast<float>(n - 1) : 0.0f;
    short_f.push_back(1.0f + 0.1f * u);
    long_f.push_back(1.0f + (2.0f * stretch - 1.0f) * u * u);
  }
}

}  // namespace

std::vector<int64_t> TensorPlan::dims() const {
  if (!is_matrix) return {cols};
  if (experts > 0) return {cols, rows, experts};
  return {cols, rows};
}

void check_shape(const ModelShape& s) {
  if (s.arch != "llama" && s.arch != "qwen2" && s.arch != "qwen2moe" && !is_qwen3(s.arch) && s.arch != "phi3")
    throw_error(ErrorCode::kInvalidArgument, "--arch '{}' is not supported ({})", s.arch, kArchs);
  check_sizes(s);
  check_experts(s);
  check_family(s);
}

std::vector<float> llama3_rope_factors(const ModelShape& s) {
  const RopeScalingShape& r = s.rope_scaling;
  const int32_t dim = s.head_size();
  const double low_wavelen = r.original_context / static_cast<double>(r.low_freq_factor);
  const double high_wavelen = r.original_context / static_cast<double>(r.high_freq_factor);
  std::vector<float> factors;
  for (int32_t i = 0; i < dim; i += 2) {
    // The converter's frequencies are float32: base ** (i / dim).
    const float freq = 1.0f / std::pow(s.rope_base, static_cast<float>(i) / static_cast<float>(dim));
    const double wavelen = 2.0 * M_PI / static_cast<double>(freq);
    if (wavelen < high_wavelen) {
      factors.push_back(1.0f);
    } else if (wavelen > low_wavelen) {
      factors.push_back(r.factor);
    } else {
      const double smooth = (r.original_context / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
      factors.push_back(static_cast<float>(1.0 / ((1.0 - smooth) / r.factor + smooth)));
    }
  }
  return factors;
}

namespace {

void add_matrix(std::vector<TensorPlan>& t, std::string name, int64_t rows, int64_t cols, DType type,
                int64_t experts = 0) {
  const DType fit = fitting_type(type, cols);
  t.push_back({std::move(name), cols, rows, experts, fit, Fill::kNormal, true, {}, fit != type, 0, {}});
}

void add_vector(std::vector<TensorPlan>& t, std::string name, int64_t n, Fill fill) {
  t.push_back({std::move(name), n, 1, 0, DType::kF32, fill, false, {}, false, 0, {}});
}

void add_values(std::vector<TensorPlan>& t, std::string name, std::vector<float> v) {
  t.push_back({std::move(name), static_cast<int64_t>(v.size()), 1, 0, DType::kF32, Fill::kValues, false, std::move(v),
               false, 0, {}});
}

void plan_attention(const ModelShape& s, const std::string& p, DType type, std::vector<TensorPlan>& t) {
  const int64_t head = s.head_size(), q_dim = head * s.num_heads, kv_dim = head * s.num_kv_heads;
  add_vector(t, p + "attn_norm.weight", s.dim, Fill::kOnes);
  if (s.arch == "phi3") {
    add_matrix(t, p + "attn_qkv.weight", q_dim + 2 * kv_dim, s.dim, type);  // q rows, k rows, v rows
  } else {
    add_matrix(t, p + "attn_q.weight", q_dim, s.dim, type);
    add_matrix(t, p + "attn_k.weight", kv_dim, s.dim, type);
    add_matrix(t, p + "attn_v.weight", kv_dim, s.dim, type);
  }
  if (s.arch == "qwen2" || s.arch == "qwen2moe") {
    add_vector(t, p + "attn_q.bias", q_dim, Fill::kNormal);
    add_vector(t, p + "attn_k.bias", kv_dim, Fill::kNormal);
    add_vector(t, p + "attn_v.bias", kv_dim, Fill::kNormal);
  }
  if (is_qwen3(s.arch)) {
    add_vector(t, p + "attn_q_norm.weight", head, Fill::kOnes);
    add_vector(t, p + "attn_k_norm.weight", head, Fill::kOnes);
  }
  add_matrix(t, p + "attn_output.weight", s.dim, q_dim, type);
}

void plan_ffn(const ModelShape& s, const std::string& p, DType type, std::vector<TensorPlan>& t) {
  add_vector(t, p + "ffn_norm.weight", s.dim, Fill::kOnes);
  if (s.num_experts > 0) {
    const int64_t E = s.num_experts, eff = s.arch == "llama" ? s.ffn_dim : s.expert_ffn_dim;
    // llama-quantize keeps the router in F32; so does this.
    add_matrix(t, p + "ffn_gate_inp.weight", E, s.dim, DType::kF32);
    add_matrix(t, p + "ffn_gate_exps.weight", eff, s.dim, type, E);
    add_matrix(t, p + "ffn_up_exps.weight", eff, s.dim, type, E);
    add_matrix(t, p + "ffn_down_exps.weight", s.dim, eff, type, E);
    if (s.shared_expert_ffn_dim > 0) {
      add_vector(t, p + "ffn_gate_inp_shexp.weight", s.dim, Fill::kNormal);
      add_matrix(t, p + "ffn_gate_shexp.weight", s.shared_expert_ffn_dim, s.dim, type);
      add_matrix(t, p + "ffn_up_shexp.weight", s.shared_expert_ffn_dim, s.dim, type);
      add_matrix(t, p + "ffn_down_shexp.weight", s.dim, s.shared_expert_ffn_dim, type);
    }
  } else if (s.arch == "phi3") {
    add_matrix(t, p + "ffn_up.weight", 2 * s.ffn_dim, s.dim, type);  // gate rows, then up rows
    add_matrix(t, p + "ffn_down.weight", s.dim, s.ffn_dim, type);
  } else {
    add_matrix(t, p + "ffn_gate.weight", s.ffn_dim, s.dim, type);
    add_matrix(t, p + "ffn_up.weight", s.ffn_dim, s.dim, type);
    add_matrix(t, p + "ffn_down.weight", s.dim, s.ffn_dim, type);
  }
}

}  // namespace

std::vector<TensorPlan> plan_tensors(const ModelShape& s, int64_t vocab, DType type) {
  std::vector<TensorPlan> t;
  add_matrix(t, "token_embd.weight", vocab, s.dim, type);
  for (int32_t l = 0; l < s.num_layers; ++l) {
    const std::string p = fmt::format("blk.{}.", l);
    plan_attention(s, p, type, t);
    plan_ffn(s, p, type, t);
  }
  add_vector(t, "output_norm.weight", s.dim, Fill::kOnes);
  if (!s.tied_embeddings) add_matrix(t, "output.weight", vocab, s.dim, type);
  if (s.rope_scaling.type == "llama3") add_values(t, "rope_freqs.weight", llama3_rope_factors(s));
  if (s.rope_scaling.type == "longrope") {
    std::vector<float> long_f, short_f;
    longrope_factors(s, long_f, short_f);
    add_values(t, "rope_factors_long.weight", std::move(long_f));
    add_values(t, "rope_factors_short.weight", std::move(short_f));
  }
  return t;
}

std::vector<int64_t> rank_label_tokens(const std::string& vocab_from) {
  const std::vector<std::string> tokens =
      GgufFile::open(vocab_from)->metadata().require_string_array("tokenizer.ggml.tokens");
  std::vector<int64_t> out;
  for (const char* label : {"yes", "no"}) {
    const auto it = std::find(tokens.begin(), tokens.end(), label);
    if (it == tokens.end())
      throw_error(ErrorCode::kInvalidArgument, "--pooling rank: '{}' has no token '{}' (the head is its row)",
                  vocab_from, label);
    out.push_back(it - tokens.begin());
  }
  return out;
}

void plan_rank_head(const ModelShape& s, std::vector<int64_t> label_tokens, std::vector<TensorPlan>& plan) {
  const std::string head = s.tied_embeddings ? "token_embd.weight" : "output.weight";
  const auto it = std::find_if(plan.begin(), plan.end(), [&](const TensorPlan& t) { return t.name == head; });
  KVLM_ASSERT(it != plan.end(), "plan_tensors plans the output head");
  const auto num_rows = static_cast<int64_t>(label_tokens.size());
  plan.push_back({"cls.output.weight", s.dim, num_rows, 0, DType::kF32, Fill::kRowsOf, true, {}, false,
                  static_cast<size_t>(it - plan.begin()), std::move(label_tokens)});
}

namespace {

// The template Qwen3-Reranker's conversion writes (tokenizer.chat_template.rerank).
constexpr const char* kQwen3RerankTemplate =
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct "
    "provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n<Instruct>: "
    "Given a web search query, retrieve relevant passages that answer the query\n<Query>: {query}\n<Document>: "
    "{document}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";

void set_shape_metadata(GgufWriter& w, const ModelShape& s, int64_t vocab) {
  const std::string p = s.arch + ".";
  auto u32 = [&](const std::string& key, int64_t v) { w.set_u32(p + key, static_cast<uint32_t>(v)); };
  u32("context_length", s.context_length);
  u32("embedding_length", s.dim);
  u32("block_count", s.num_layers);
  u32("feed_forward_length", s.ffn_dim);
  u32("attention.head_count", s.num_heads);
  u32("attention.head_count_kv", s.num_kv_heads);
  if (s.head_dim > 0) {
    u32("attention.key_length", s.head_dim);
    u32("attention.value_length", s.head_dim);
  }
  u32("rope.dimension_count", s.head_size());
  w.set_f32(p + "attention.layer_norm_rms_epsilon", s.norm_eps);
  w.set_f32(p + "rope.freq_base", s.rope_base);
  u32("vocab_size", vocab);
  if (s.num_experts > 0) {
    u32("expert_count", s.num_experts);
    u32("expert_used_count", s.num_experts_used);
    if (s.arch != "llama") u32("expert_feed_forward_length", s.expert_ffn_dim);
    if (s.shared_expert_ffn_dim > 0) u32("expert_shared_feed_forward_length", s.shared_expert_ffn_dim);
  }
  if (s.arch == "phi3") {
    // The converter writes both for every Phi-3; 0 = no window.
    const int32_t original = s.rope_scaling.original_context > 0 ? s.rope_scaling.original_context : s.context_length;
    u32("rope.scaling.original_context_length", original);
    u32("attention.sliding_window", s.sliding_window);
  }
  if (s.rank_head) {
    u32("pooling_type", 4);  // rank
    w.set(p + "classifier.output_labels", meta_string_array({"yes", "no"}));
  }
  if (s.rope_scaling.type == "longrope") {
    // As the converter computes it for su/longrope scaling.
    const double scale = static_cast<double>(s.context_length) / s.rope_scaling.original_context;
    w.set_f32(p + "rope.scaling.attn_factor",
              static_cast<float>(std::sqrt(1.0 + std::log(scale) / std::log(s.rope_scaling.original_context))));
  }
}

bool names_phi3(std::string name) {
  for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return name.find("phi3") != std::string::npos || name.find("phi-3") != std::string::npos;
}

// general.name. llama.cpp gives a model whose name says "phi3" or "phi-3"
// Phi-3's special-token attributes, looking up <unk>, <s>, </s> and
// <|endoftext|> by text, and fails to load when the vocabulary lacks one; a
// Phi-3 shape over another vocabulary gets a name that does not say so.
std::string model_name(const ModelShape& s, const MetaValue& tokens) {
  std::string name = s.name.empty() ? "random " + s.arch : s.name;
  if (!names_phi3(name)) return name;
  std::set<std::string> missing = {"<unk>", "<s>", "</s>", "<|endoftext|>"};
  for (const MetaValue& t : tokens.as_array("tokenizer.ggml.tokens")) missing.erase(t.as_string("tokenizer.ggml.tokens"));
  return missing.empty() ? name : "random weights, Phi 3 shape";
}

// A vocabulary table larger than the tokenizer (--vocab, or a preset's,
// as Llama 3's 128,256 over a 32,000-token tokenizer): the token list is
// padded with unused [PADi] tokens, as llama.cpp's converter pads Phi-3's,
// so that every row has a token and llama.cpp loads the file too.
void pad_vocabulary(GgufWriter& w, const Metadata& m, int64_t vocab) {
  std::vector<std::string> tokens = m.require_string_array("tokenizer.ggml.tokens");
  const auto num_tokens = static_cast<int64_t>(tokens.size());
  if (vocab == num_tokens) return;
  for (int64_t i = num_tokens; i < vocab; ++i) tokens.push_back(fmt::format("[PAD{}]", i));
  w.set("tokenizer.ggml.tokens", meta_string_array(tokens));
  if (auto scores = m.get_float_array("tokenizer.ggml.scores"); scores && std::ssize(*scores) == num_tokens) {
    scores->resize(static_cast<size_t>(vocab), -10000.f);
    w.set("tokenizer.ggml.scores", meta_f32_array(*scores));
  }
  if (const MetaValue* types = m.find("tokenizer.ggml.token_type")) {
    std::vector<int32_t> t;
    for (const MetaValue& v : types->as_array("tokenizer.ggml.token_type"))
      t.push_back(static_cast<int32_t>(v.as_int("tokenizer.ggml.token_type")));
    if (std::ssize(t) == num_tokens) {
      t.resize(static_cast<size_t>(vocab), 5);  // llama.cpp's LLAMA_TOKEN_TYPE_UNUSED
      w.set("tokenizer.ggml.token_type", meta_i32_array(t));
    }
  }
}

}  // namespace

int64_t set_metadata(GgufWriter& w, const MakeModelOptions& o) {
  const ModelShape& s = o.shape;
  auto vocab_file = GgufFile::open(o.vocab_from);
  const MetaValue* tokens = vocab_file->metadata().find("tokenizer.ggml.tokens");
  if (tokens == nullptr)
    throw_error(ErrorCode::kInvalidArgument, "--vocab-from '{}' has no tokenizer.ggml.tokens", o.vocab_from);
  const int64_t num_tokens = static_cast<int64_t>(tokens->as_array("tokenizer.ggml.tokens").size());
  const int64_t vocab = s.vocab_size.value_or(num_tokens);
  // A smaller table than the tokenizer would let it produce ids with no embedding row.
  if (vocab < num_tokens)
    throw_error(ErrorCode::kInvalidArgument, "--vocab {} is smaller than the {} tokens of '{}'", vocab, num_tokens,
                o.vocab_from);
  w.set_string("general.architecture", s.arch);
  w.set_string("general.name", model_name(s, *tokens));
  w.set_u32("general.file_type", file_type(o.type));
  set_shape_metadata(w, s, vocab);
  for (const auto& [key, value] : vocab_file->metadata().entries())
    if (key.rfind("tokenizer.", 0) == 0) w.set(key, value);
  pad_vocabulary(w, vocab_file->metadata(), vocab);
  if (s.rank_head) w.set_string("tokenizer.chat_template.rerank", kQwen3RerankTemplate);
  return vocab;
}

}  // namespace kvlm
