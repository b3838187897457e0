#include "model/lora_load.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "backend/quant.h"
#include "common/error.h"
#include "common/printable.h"
#include "model/lora_builder.h"

namespace kvlm {
namespace {

using enum LoraTarget;

// Names in a message: the first few, then how many more.
std::string some_names(const std::vector<std::string>& names) {
  constexpr size_t kShown = 8;
  std::vector<std::string> shown;
  for (size_t i = 0; i < names.size() && i < kShown; ++i) shown.push_back(fmt::format("'{}'", printable(names[i], 120)));
  std::string out = fmt::format("{}", fmt::join(shown, ", "));
  if (names.size() > kShown) out += fmt::format(" and {} more", names.size() - kShown);
  return out;
}

std::string target_list(const ModelConfig& config) {
  std::vector<std::string_view> names;
  for (LoraTarget t : lora_supported_targets(config)) names.push_back(lora_target_gguf_name(t));
  return fmt::format("{}", fmt::join(names, ", "));
}

// A GGUF tensor of an adapter file as F32 [dims[1], dims[0]].
LoraMatrix read_gguf_matrix(const std::string& source, const GgufTensor& t) {
  if (t.dims.size() != 2)
    throw_error(ErrorCode::kCorrupt, "{}: tensor '{}' has shape {}; a LoRA tensor is a matrix", source,
                printable(t.name), t.shape_string());
  LoraMatrix m;
  m.cols = t.dims[0];
  m.rows = t.dims[1];
  m.values.resize(static_cast<size_t>(m.rows * m.cols));
  const size_t bytes = row_bytes(t.dtype, m.cols);
  for (int64_t r = 0; r < m.rows; ++r)
    dequantize_row(t.dtype, t.data + static_cast<size_t>(r) * bytes, m.values.data() + r * m.cols, m.cols);
  return m;
}

void check_gguf_header(const std::string& path, const GgufFile& file, const ModelConfig& config) {
  const Metadata& m = file.metadata();
  const std::optional<std::string> type = m.get_string("general.type");
  if (type != "adapter")
    throw_error(ErrorCode::kInvalidArgument, "{}: general.type is '{}', not 'adapter': this is not a LoRA adapter "
                "(a PEFT adapter is a folder with adapter_config.json)", path, printable(type.value_or("")));
  const std::optional<std::string> kind = m.get_string("adapter.type");
  if (kind != "lora")
    throw_error(ErrorCode::kUnsupported, "{}: adapter.type is '{}'; kvlm applies 'lora' adapters only", path,
                printable(kind.value_or("")));
  const std::string arch = m.get_string("general.architecture").value_or("");
  if (arch != config.arch_name)
    throw_error(ErrorCode::kInvalidArgument, "{}: the adapter is for architecture '{}', the base model is '{}'", path,
                printable(arch), config.arch_name);
  if (m.has("adapter.alora.invocation_tokens"))
    throw_error(ErrorCode::kUnsupported, "{}: an activated LoRA (adapter.alora.invocation_tokens) is not supported",
                path);
}

struct GgufPairNames {
  const GgufTensor* a = nullptr;
  const GgufTensor* b = nullptr;
};

std::shared_ptr<const LoraAdapter> load_gguf_lora(const std::string& path, const GgufFile& base,
                                                  const ModelConfig& config, const Backend& backend, float user_scale,
                                                  DType dtype) {
  const std::unique_ptr<GgufFile> file = GgufFile::open(path);
  check_gguf_header(path, *file, config);
  const double alpha = file->metadata().get_float("adapter.lora.alpha").value_or(0.0);
  std::map<std::string, GgufPairNames> by_base;  // ordered: messages list names the same way every time
  LoraBuilder builder(path, base, config);
  for (const GgufTensor& t : file->tensors()) {
    const bool is_a = t.name.ends_with(".lora_a"), is_b = t.name.ends_with(".lora_b");
    if (!is_a && !is_b) {
      builder.refuse(t.name);
      continue;
    }
    GgufPairNames& p = by_base[t.name.substr(0, t.name.size() - 7)];
    (is_a ? p.a : p.b) = &t;
  }
  for (const auto& [name, p] : by_base) {
    const auto at = lora_base_tensor(name, config);
    if (!at || !p.a || !p.b) {
      builder.refuse(!at ? name : fmt::format("{} (no {})", name, p.a ? "lora_b" : "lora_a"));
      continue;
    }
    LoraMatrix a = read_gguf_matrix(path, *p.a), b = read_gguf_matrix(path, *p.b);
    // llama.cpp's rule: alpha / rank with the pair's own rank, none without alpha.
    const float scale = alpha != 0.0 ? static_cast<float>(user_scale * alpha / static_cast<double>(a.rows)) : user_scale;
    builder.add(name, at->first, at->second, std::move(a), std::move(b), scale);
  }
  return builder.finish(backend, dtype);
}

}  // namespace

std::vector<LoraTarget> lora_supported_targets(const ModelConfig& config) {
  if (config.arch == Arch::kGpt2) return {kQkv, kOut, kUp, kDown};
  if (config.arch == Arch::kPhi3) return {kOut, kDown};
  if (config.moe.enabled()) return {kQ, kK, kV, kOut};
  return {kQ, kK, kV, kOut, kGate, kUp, kDown};
}

bool lora_permutes_qk(const ModelConfig& config) { return config.arch_name == "llama"; }

void permute_qk_rows(std::vector<float>& m, int64_t rows, int64_t cols, int64_t num_heads, bool to_gguf) {
  const int64_t head_dim = rows / num_heads;
  std::vector<float> out(m.size());
  for (int64_t h = 0; h < num_heads; ++h)
    for (int64_t i = 0; i < head_dim / 2; ++i)
      for (int64_t half = 0; half < 2; ++half) {
        const int64_t hf = h * head_dim + half * head_dim / 2 + i, gguf = h * head_dim + 2 * i + half;
        const int64_t from = to_gguf ? hf : gguf, to = to_gguf ? gguf : hf;
        std::copy_n(m.begin() + from * cols, cols, out.begin() + to * cols);
      }
  m = std::move(out);
}

std::optional<std::pair<int64_t, LoraTarget>> lora_base_tensor(const std::string& gguf_name,
                                                              const ModelConfig& config) {
  if (!gguf_name.starts_with("blk.") || !gguf_name.ends_with(".weight")) return std::nullopt;
  const size_t dot = gguf_name.find('.', 4);
  const std::string num = gguf_name.substr(4, dot - 4);
  if (num.empty() || num.size() > 6 || num.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  const std::string part = gguf_name.substr(dot + 1, gguf_name.size() - 7 - dot - 1);
  const std::optional<LoraTarget> t = lora_target_from_gguf_name(part);
  const std::vector<LoraTarget> ok = lora_supported_targets(config);
  if (!t || std::find(ok.begin(), ok.end(), *t) == ok.end()) return std::nullopt;
  return std::pair{std::stoll(num), *t};
}

LoraBuilder::LoraBuilder(std::string source, const GgufFile& base, const ModelConfig& config)
    : source_(std::move(source)), base_(base), config_(config) {}

void LoraBuilder::add(const std::string& what, int64_t layer, LoraTarget target, LoraMatrix a, LoraMatrix b,
                      float scale) {
  if (layer < 0 || layer >= config_.num_layers)
    throw_error(ErrorCode::kInvalidArgument, "{}: '{}' adapts layer {}, but the base model has {} layers", source_,
                printable(what), layer, config_.num_layers);
  const std::string name = fmt::format("blk.{}.{}.weight", layer, lora_target_gguf_name(target));
  const GgufTensor* w = base_.find_tensor(name);
  if (!w || w->dims.size() != 2)
    throw_error(ErrorCode::kInvalidArgument, "{}: '{}' adapts '{}', which the base model {} has no matrix of",
                source_, printable(what), name, base_.path());
  const int64_t in = w->dims[0], out = w->dims[1];
  if (a.rows <= 0 || a.rows != b.cols)
    throw_error(ErrorCode::kCorrupt, "{}: '{}': lora_A is [{}, {}] and lora_B [{}, {}]; A's rows and B's columns "
                "(the rank) must be equal and positive", source_, printable(what), a.rows, a.cols, b.rows, b.cols);
  if (a.cols != in || b.rows != out)
    throw_error(ErrorCode::kInvalidArgument, "{}: '{}': lora_A is [{}, {}] and lora_B [{}, {}], but the base's '{}' "
                "is [{}, {}] (out, in): the adapter was made for another model", source_, printable(what), a.rows,
                a.cols, b.rows, b.cols, name, out, in);
  for (const Pending& p : pairs_)
    if (p.layer == layer && p.target == target)
      throw_error(ErrorCode::kCorrupt, "{}: '{}' is adapted twice", source_, name);
  if (!std::isfinite(scale))
    throw_error(ErrorCode::kInvalidArgument, "{}: '{}': the scale is not finite", source_, printable(what));
  pairs_.push_back(Pending{layer, target, std::move(a), std::move(b), scale});
}

std::shared_ptr<const LoraAdapter> LoraBuilder::finish(const Backend& backend, DType dtype) {
  if (!refused_.empty())
    throw_error(ErrorCode::kUnsupported, "{}: kvlm cannot apply {}; on a {} model it applies LoRA to {} only",
                source_, some_names(refused_), config_.arch_name, target_list(config_));
  if (pairs_.empty()) throw_error(ErrorCode::kUnsupported, "{}: the adapter has no LoRA tensors", source_);
  // (layer, target) order: the identity and the messages do not depend on the file's order.
  std::sort(pairs_.begin(), pairs_.end(),
            [](const Pending& x, const Pending& y) { return std::tie(x.layer, x.target) < std::tie(y.layer, y.target); });
  auto adapter = std::make_shared<LoraAdapter>();
  adapter->source = source_;
  adapter->dtype = dtype;
  adapter->layers.resize(static_cast<size_t>(config_.num_layers));
  // The held type changes the products' bits, so it is part of the identity.
  Hash128 h = hash128(&dtype, sizeof(dtype));
  for (Pending& p : pairs_) {
    const int32_t layer = static_cast<int32_t>(p.layer);
    const auto target = static_cast<uint8_t>(p.target);
    const int64_t dims[4] = {p.a.rows, p.a.cols, p.b.rows, p.b.cols};
    h = hash128(&layer, sizeof(layer), h);
    h = hash128(&target, sizeof(target), h);
    h = hash128(&p.scale, sizeof(p.scale), h);
    h = hash128(dims, sizeof(dims), h);  // so two splits of equal bytes differ
    h = hash128(p.a.values.data(), p.a.values.size() * sizeof(float), h);
    h = hash128(p.b.values.data(), p.b.values.size() * sizeof(float), h);
    LoraPair pair;
    pair.scale = p.scale;
    pair.a = keep_lora_matrix(*adapter, p.a.values, p.a.rows, p.a.cols, backend);
    pair.b = keep_lora_matrix(*adapter, p.b.values, p.b.rows, p.b.cols, backend);
    adapter->max_rank = std::max(adapter->max_rank, static_cast<int32_t>(p.a.rows));
    adapter->layers[static_cast<size_t>(layer)][target] = std::move(pair);
  }
  adapter->identity = h;
  return adapter;
}

std::shared_ptr<const LoraAdapter> load_lora(const std::string& path, const GgufFile& base, const ModelConfig& config,
                                             const Backend& backend, float user_scale, DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16)
    throw_error(ErrorCode::kInvalidArgument, "{}: LoRA matrices are held as f32, f16 or bf16, not {}", path,
                dtype_info(dtype).name);
  if (!std::isfinite(user_scale))
    throw_error(ErrorCode::kInvalidArgument, "{}: the LoRA scale {} is not a finite number", path, user_scale);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw_error(ErrorCode::kNotFound, "{}: no such LoRA adapter (a PEFT folder or a GGUF LoRA file)", path);
  if (std::filesystem::is_directory(path, ec)) return load_peft_lora(path, base, config, backend, user_scale, dtype);
  return load_gguf_lora(path, base, config, backend, user_scale, dtype);
}

}  // namespace kvlm
