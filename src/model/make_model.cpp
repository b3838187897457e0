#include "model/make_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "backend/quant.h"
#include "backend/thread_pool.h"
#include "common/error.h"
#include "model/gguf.h"
#include "model/gguf_writer.h"

namespace kvlm {
namespace {

ModelShape preset(std::string arch, std::string name, int32_t dim, int32_t layers, int32_t heads,
                  int32_t kv_heads, int32_t ffn, int32_t ctx, float rope_base, float eps, bool tied) {
  ModelShape s;
  s.arch = std::move(arch);
  s.name = std::move(name);
  s.dim = dim;
  s.num_layers = layers;
  s.num_heads = heads;
  s.num_kv_heads = kv_heads;
  s.ffn_dim = ffn;
  s.context_length = ctx;
  s.rope_base = rope_base;
  s.norm_eps = eps;
  s.tied_embeddings = tied;
  return s;
}

// The published configs of the three models (their config.json files).
struct Preset {
  const char* key;
  ModelShape shape;
};
const std::vector<Preset>& presets() {
  static const std::vector<Preset> p = {
      {"tinyllama-1.1b", preset("llama", "TinyLlama-1.1B (random)", 2048, 22, 32, 4, 5632, 2048, 10000.0f, 1e-5f, false)},
      {"qwen2.5-0.5b", preset("qwen2", "Qwen2.5-0.5B (random)", 896, 24, 14, 2, 4864, 32768, 1e6f, 1e-6f, true)},
      {"llama-3.2-1b", preset("llama", "Llama-3.2-1B (random)", 2048, 16, 32, 8, 8192, 131072, 500000.0f, 1e-5f, true)},
  };
  return p;
}

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

enum class Fill { kNormal, kOnes };

struct TensorPlan {
  std::string name;
  int64_t cols = 0;  // row length (GGUF dims[0])
  int64_t rows = 1;  // 1 for a vector
  DType dtype = DType::kF32;
  Fill fill = Fill::kNormal;
  bool is_matrix = true;  // GGUF dims {cols, rows}; a vector's are {cols}
};

// splitmix64: a tiny generator whose stream is fixed by its seed on every
// platform (std::normal_distribution is not specified bit for bit).
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// n values of N(0, sigma^2) by Box-Muller, from a stream seeded by `key`.
void fill_normal(uint64_t key, float sigma, float* out, int64_t n) {
  uint64_t state = key;
  for (int64_t i = 0; i < n; i += 2) {
    // 24-bit uniforms in (0, 1]: log() never sees 0.
    const float u1 = static_cast<float>((splitmix64(state) >> 40) + 1) * (1.0f / 16777216.0f);
    const float u2 = static_cast<float>(splitmix64(state) >> 40) * (1.0f / 16777216.0f);
    const float r = sigma * std::sqrt(-2.0f * std::log(u1));
    const float a = 6.2831853f * u2;
    out[i] = r * std::cos(a);
    if (i + 1 < n) out[i + 1] = r * std::sin(a);
  }
}

uint64_t row_key(uint64_t seed, size_t tensor, int64_t row) {
  uint64_t s = seed ^ (0xD1B54A32D192ED03ull * (tensor + 1));
  splitmix64(s);
  return s ^ (0x8CB92BA72F3D8DD7ull * static_cast<uint64_t>(row + 1));
}

std::vector<TensorPlan> plan_tensors(const ModelShape& s, int64_t vocab, DType type) {
  const int64_t head_dim = s.dim / s.num_heads;
  const int64_t q_dim = head_dim * s.num_heads, kv_dim = head_dim * s.num_kv_heads;
  std::vector<TensorPlan> t;
  auto matrix = [&](std::string name, int64_t rows, int64_t cols) {
    t.push_back({std::move(name), cols, rows, fitting_type(type, cols), Fill::kNormal, true});
  };
  auto vec = [&](std::string name, int64_t n, Fill fill) { t.push_back({std::move(name), n, 1, DType::kF32, fill, false}); };
  matrix("token_embd.weight", vocab, s.dim);
  for (int32_t l = 0; l < s.num_layers; ++l) {
    const std::string p = fmt::format("blk.{}.", l);
    vec(p + "attn_norm.weight", s.dim, Fill::kOnes);
    matrix(p + "attn_q.weight", q_dim, s.dim);
    matrix(p + "attn_k.weight", kv_dim, s.dim);
    matrix(p + "attn_v.weight", kv_dim, s.dim);
    if (s.arch == "qwen2") {
      vec(p + "attn_q.bias", q_dim, Fill::kNormal);
      vec(p + "attn_k.bias", kv_dim, Fill::kNormal);
      vec(p + "attn_v.bias", kv_dim, Fill::kNormal);
    }
    matrix(p + "attn_output.weight", s.dim, q_dim);
    vec(p + "ffn_norm.weight", s.dim, Fill::kOnes);
    matrix(p + "ffn_gate.weight", s.ffn_dim, s.dim);
    matrix(p + "ffn_up.weight", s.ffn_dim, s.dim);
    matrix(p + "ffn_down.weight", s.dim, s.ffn_dim);
  }
  vec("output_norm.weight", s.dim, Fill::kOnes);
  if (!s.tied_embeddings) matrix("output.weight", vocab, s.dim);
  return t;
}

void check_shape(const ModelShape& s) {
  if (s.arch != "llama" && s.arch != "qwen2")
    throw_error(ErrorCode::kInvalidArgument, "--arch '{}' is not supported (llama, qwen2)", s.arch);
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
  if (s.dim % s.num_heads != 0 || (s.dim / s.num_heads) % 2 != 0)
    throw_error(ErrorCode::kInvalidArgument, "--dim {} must be --heads {} times an even head size", s.dim, s.num_heads);
  if (s.num_heads % s.num_kv_heads != 0)
    throw_error(ErrorCode::kInvalidArgument, "--heads {} must be a multiple of --kv-heads {}", s.num_heads, s.num_kv_heads);
  if (!(s.rope_base > 0.0f)) throw_error(ErrorCode::kInvalidArgument, "--rope-base {} must be positive", s.rope_base);
}

// Model metadata plus the vocabulary file's tokenizer.* keys; returns the vocab size.
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
  const std::string p = s.arch + ".";
  w.set_string("general.architecture", s.arch);
  w.set_string("general.name", s.name.empty() ? std::string("random ") + s.arch : s.name);
  w.set_u32("general.file_type", file_type(o.type));
  w.set_u32(p + "context_length", static_cast<uint32_t>(s.context_length));
  w.set_u32(p + "embedding_length", static_cast<uint32_t>(s.dim));
  w.set_u32(p + "block_count", static_cast<uint32_t>(s.num_layers));
  w.set_u32(p + "feed_forward_length", static_cast<uint32_t>(s.ffn_dim));
  w.set_u32(p + "attention.head_count", static_cast<uint32_t>(s.num_heads));
  w.set_u32(p + "attention.head_count_kv", static_cast<uint32_t>(s.num_kv_heads));
  w.set_u32(p + "rope.dimension_count", static_cast<uint32_t>(s.dim / s.num_heads));
  w.set_f32(p + "attention.layer_norm_rms_epsilon", s.norm_eps);
  w.set_f32(p + "rope.freq_base", s.rope_base);
  w.set_u32(p + "vocab_size", static_cast<uint32_t>(vocab));
  for (const auto& [key, value] : vocab_file->metadata().entries())
    if (key.rfind("tokenizer.", 0) == 0) w.set(key, value);
  return vocab;
}

// Generates one tensor in chunks of rows on the compute threads and passes
// each chunk to `sink`; memory stays at one chunk (about 8 MiB of f32).
void produce_tensor(const TensorPlan& t, size_t index, uint64_t seed, const GgufWriter::ByteSinkFn& sink) {
  const size_t out_row = row_bytes(t.dtype, t.cols);
  const int64_t chunk_rows = std::max<int64_t>(1, (int64_t{8} << 20) / (t.cols * 4));
  std::vector<uint8_t> out;
  std::vector<std::vector<float>> scratch;
  for (int64_t r0 = 0; r0 < t.rows; r0 += chunk_rows) {
    const int64_t n = std::min(chunk_rows, t.rows - r0);
    out.resize(static_cast<size_t>(n) * out_row);
    scratch.resize(static_cast<size_t>(n));
    parallel_for(n, [&](int64_t i, int /*worker*/) {
      std::vector<float>& row = scratch[static_cast<size_t>(i)];
      row.resize(static_cast<size_t>(t.cols));
      if (t.fill == Fill::kOnes) {
        std::fill(row.begin(), row.end(), 1.0f);
      } else {
        fill_normal(row_key(seed, index, r0 + i), 0.02f, row.data(), t.cols);
      }
      quantize_row(t.dtype, row.data(), out.data() + static_cast<size_t>(i) * out_row, t.cols);
    });
    sink(out.data(), out.size());
  }
}

}  // namespace

std::optional<ModelShape> model_preset(std::string_view name) {
  for (const auto& p : presets())
    if (name == p.key) return p.shape;
  return std::nullopt;
}

const std::vector<std::string>& model_preset_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& p : presets()) v.emplace_back(p.key);
    return v;
  }();
  return names;
}

MakeModelResult make_model(const MakeModelOptions& o, const std::function<void(const std::string&)>& log) {
  using Clock = std::chrono::steady_clock;
  check_shape(o.shape);
  GgufWriter w;
  const int64_t vocab = set_metadata(w, o);
  const std::vector<TensorPlan> plan = plan_tensors(o.shape, vocab, o.type);

  MakeModelResult result;
  std::set<std::string> fallbacks;
  for (const auto& t : plan) {
    w.declare_tensor(t.name, t.is_matrix ? std::vector<int64_t>{t.cols, t.rows} : std::vector<int64_t>{t.cols},
                     t.dtype);
    result.num_params += t.cols * t.rows;
    if (t.is_matrix && t.dtype != o.type)
      fallbacks.insert(fmt::format("rows of {} values are not a multiple of {}'s block of {}: {} instead",
                                   t.cols, dtype_name(o.type), dtype_info(o.type).block_size, dtype_name(t.dtype)));
  }
  for (const auto& f : fallbacks) log(f);

  const auto start = Clock::now();
  auto last_report = start;
  result.file_bytes = w.write_streaming(o.out_path, [&](size_t index, const GgufWriter::ByteSinkFn& sink) {
    produce_tensor(plan[index], index, o.seed, sink);
    const auto now = Clock::now();
    if (now - last_report > std::chrono::seconds(2) || index + 1 == plan.size()) {
      log(fmt::format("[{}/{}] {} ({:.1f} s)", index + 1, plan.size(), plan[index].name,
                      std::chrono::duration<double>(now - start).count()));
      last_report = now;
    }
  });
  return result;
}

}  // namespace kvlm
