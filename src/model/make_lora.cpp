#include "model/make_lora.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "backend/quant.h"
#include "common/assert.h"
#include "common/error.h"
#include "model/make_model.h"
#include "common/printable.h"
#include "model/gguf_writer.h"
#include "model/hf_checkpoint.h"
#include "model/lora_load.h"
#include "model/safetensors_writer.h"

namespace kvlm {
namespace {

using enum LoraTarget;

// The HF module of each target after "<layer prefix>.": llama-style, GPT-2.
struct ModuleNames {
  LoraTarget target;
  const char* llama;
  const char* gpt2;
  // target_modules' entry: the shortest suffix naming only this module
  // (GPT-2 has two c_proj; PEFT matches entries as dotted suffixes).
  const char* llama_short;
  const char* gpt2_short;
};
constexpr ModuleNames kModules[] = {
    {kQ, "self_attn.q_proj", nullptr, "q_proj", nullptr},
    {kK, "self_attn.k_proj", nullptr, "k_proj", nullptr},
    {kV, "self_attn.v_proj", nullptr, "v_proj", nullptr},
    {kQkv, nullptr, "attn.c_attn", nullptr, "c_attn"},
    {kOut, "self_attn.o_proj", "attn.c_proj", "o_proj", "attn.c_proj"},
    {kGate, "mlp.gate_proj", nullptr, "gate_proj", nullptr},
    {kUp, "mlp.up_proj", "mlp.c_fc", "up_proj", "c_fc"},
    {kDown, "mlp.down_proj", "mlp.c_proj", "down_proj", "mlp.c_proj"},
};

const ModuleNames& module_names(LoraTarget t) { return kModules[static_cast<size_t>(t)]; }

// A uniform in [0, 1) from 24 bits: the same stream on every platform,
// which std's distributions do not promise.
float uniform01(uint64_t& state) { return static_cast<float>(splitmix64(state) >> 40) * (1.0f / 16777216.0f); }

// One pair's matrices in GGUF's layout: A [rank, in] uniform, B [out, rank] normal.
struct RandomPair {
  std::vector<float> a, b;
  int64_t in = 0, out = 0;
};

RandomPair random_pair(const MakeLoraOptions& o, int64_t layer, LoraTarget t, int64_t in, int64_t out) {
  uint64_t state = o.seed ^ (0xD1B54A32D192ED03ull * static_cast<uint64_t>(layer * kNumLoraTargets + static_cast<size_t>(t) + 1));
  splitmix64(state);
  RandomPair p{std::vector<float>(static_cast<size_t>(o.rank * in)), std::vector<float>(static_cast<size_t>(out * o.rank)),
               in, out};
  const float bound = 1.0f / std::sqrt(static_cast<float>(in));
  for (float& v : p.a) v = (2.0f * uniform01(state) - 1.0f) * bound;
  for (size_t i = 0; i < p.b.size(); i += 2) {  // Box-Muller
    const float u1 = 1.0f - uniform01(state), u2 = uniform01(state);  // u1 in (0, 1]: log() never sees 0
    const float r = o.b_std * std::sqrt(-2.0f * std::log(u1));
    p.b[i] = r * std::cos(6.2831853f * u2);
    if (i + 1 < p.b.size()) p.b[i + 1] = r * std::sin(6.2831853f * u2);
  }
  return p;
}

std::vector<uint8_t> to_bytes(const std::vector<float>& v, DType dtype) {
  std::vector<uint8_t> out(row_bytes(dtype, static_cast<int64_t>(v.size())));
  quantize_row(dtype, v.data(), out.data(), static_cast<int64_t>(v.size()));  // F32/F16/BF16: elementwise
  return out;
}

nlohmann::json peft_config(const MakeLoraOptions& o, const ModelConfig& config, const std::vector<LoraTarget>& targets) {
  std::vector<std::string> modules;
  for (LoraTarget t : targets) {
    const ModuleNames& m = module_names(t);
    modules.emplace_back(config.arch == Arch::kGpt2 ? m.gpt2_short : m.llama_short);
  }
  return {{"peft_type", "LORA"},       {"task_type", "CAUSAL_LM"},   {"r", o.rank},
          {"lora_alpha", o.alpha},     {"target_modules", modules}, {"use_rslora", o.rslora},
          {"use_dora", false},         {"bias", "none"},            {"lora_dropout", 0.0},
          {"fan_in_fan_out", config.arch == Arch::kGpt2},  // GPT-2's Conv1D store [in, out]
          {"inference_mode", true},    {"base_model_name_or_path", o.base_path},
          {"rank_pattern", nlohmann::json::object()}, {"alpha_pattern", nlohmann::json::object()}};
}

void check_options(const MakeLoraOptions& o) {
  if (o.rank <= 0) throw_error(ErrorCode::kInvalidArgument, "--rank {} must be positive", o.rank);
  if (o.dtype != DType::kF32 && o.dtype != DType::kF16 && o.dtype != DType::kBF16)
    throw_error(ErrorCode::kInvalidArgument, "--dtype {}: LoRA tensors are written f32, f16 or bf16",
                dtype_name(o.dtype));
  if (!std::isfinite(o.alpha) || !std::isfinite(o.b_std) || o.b_std < 0)
    throw_error(ErrorCode::kInvalidArgument, "--alpha and --scale-init must be finite (and --scale-init not negative)");
}

}  // namespace

std::vector<LoraTarget> parse_lora_targets(const std::string& spec, const ModelConfig& config) {
  const std::vector<LoraTarget> ok = lora_supported_targets(config);
  std::vector<LoraTarget> out;
  if (spec == "all") return ok;
  if (spec == "attn") {
    for (LoraTarget t : ok)
      if (t == kQ || t == kK || t == kV || t == kQkv || t == kOut) out.push_back(t);
    return out;
  }
  std::vector<std::string> names;
  for (LoraTarget t : ok) names.emplace_back(lora_target_gguf_name(t));
  size_t begin = 0;
  while (begin <= spec.size()) {
    const size_t end = std::min(spec.find(',', begin), spec.size());
    const std::string name = spec.substr(begin, end - begin);
    const std::optional<LoraTarget> t = lora_target_from_gguf_name(name);
    if (!t || std::find(ok.begin(), ok.end(), *t) == ok.end())
      throw_error(ErrorCode::kInvalidArgument, "--targets: '{}' is not a target kvlm applies on a {} model (attn, "
                  "all, or a comma list of: {})", printable(name), config.arch_name, fmt::join(names, ", "));
    if (std::find(out.begin(), out.end(), *t) == out.end()) out.push_back(*t);
    begin = end + 1;
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string lora_hf_module(const ModelConfig& config, int64_t layer, LoraTarget target) {
  const ModuleNames& m = module_names(target);
  const char* part = config.arch == Arch::kGpt2 ? m.gpt2 : m.llama;
  KVLM_ASSERT(part != nullptr, "lora_hf_module: a target this family does not have");
  return config.arch == Arch::kGpt2 ? fmt::format("transformer.h.{}.{}", layer, part)
                                    : fmt::format("model.layers.{}.{}", layer, part);
}

MakeLoraResult make_lora(const MakeLoraOptions& o) {
  check_options(o);
  const std::unique_ptr<GgufFile> base = open_model_file(o.base_path);
  const ModelConfig config = ModelConfig::from_metadata(base->metadata());
  MakeLoraResult result;
  result.targets = parse_lora_targets(o.targets, config);
  SafetensorsWriter st;
  GgufWriter gguf;
  for (int64_t layer = 0; layer < config.num_layers; ++layer) {
    for (LoraTarget t : result.targets) {
      const std::string name = fmt::format("blk.{}.{}.weight", layer, lora_target_gguf_name(t));
      const GgufTensor& w = base->require_tensor(name);
      RandomPair p = random_pair(o, layer, t, w.dims[0], w.dims[1]);
      std::vector<uint8_t> a = to_bytes(p.a, o.dtype);
      result.num_bytes += a.size();
      if (o.format == LoraFormat::kGguf) {
        gguf.add_tensor(name + ".lora_a", {p.in, o.rank}, o.dtype, std::move(a));
        std::vector<uint8_t> b = to_bytes(p.b, o.dtype);
        result.num_bytes += b.size();
        gguf.add_tensor(name + ".lora_b", {o.rank, p.out}, o.dtype, std::move(b));
      } else {
        // HF's row order: what load_lora permutes back into the base's.
        if (lora_permutes_qk(config) && (t == kQ || t == kK))
          permute_qk_rows(p.b, p.out, o.rank, t == kQ ? config.num_heads : config.num_kv_heads, /*to_gguf=*/false);
        std::vector<uint8_t> b = to_bytes(p.b, o.dtype);
        result.num_bytes += b.size();
        const std::string module = "base_model.model." + lora_hf_module(config, layer, t);
        st.add(module + ".lora_A.weight", o.dtype, {o.rank, p.in}, std::move(a));
        st.add(module + ".lora_B.weight", o.dtype, {p.out, o.rank}, std::move(b));
      }
      ++result.num_pairs;
    }
  }
  if (o.format == LoraFormat::kGguf) {
    gguf.set_string("general.architecture", config.arch_name);
    gguf.set_string("general.type", "adapter");
    gguf.set_string("general.name", "kvlm make-lora");
    gguf.set_string("adapter.type", "lora");
    // llama.cpp scales by alpha / rank; rsLoRA's alpha / sqrt(rank) is that
    // with alpha * sqrt(rank), the value convert_lora_to_gguf.py would need.
    gguf.set_f32("adapter.lora.alpha", o.rslora ? o.alpha * std::sqrt(static_cast<float>(o.rank)) : o.alpha);
    gguf.write(o.out_path);
    return result;
  }
  std::error_code ec;
  std::filesystem::create_directories(o.out_path, ec);
  if (ec) throw_error(ErrorCode::kInvalidArgument, "{}: cannot create the folder: {}", o.out_path, ec.message());
  std::ofstream config_out(std::filesystem::path(o.out_path) / "adapter_config.json");
  config_out << peft_config(o, config, result.targets).dump(2) << "\n";
  if (!config_out.good()) throw_error(ErrorCode::kInvalidArgument, "{}: cannot write adapter_config.json", o.out_path);
  st.set_metadata("format", "pt");
  st.write((std::filesystem::path(o.out_path) / "adapter_model.safetensors").string());
  return result;
}

}  // namespace kvlm
