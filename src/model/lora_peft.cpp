// PEFT LoRA folders: adapter_config.json + adapter_model.safetensors, as
// PEFT's save_pretrained writes them.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "backend/quant.h"
#include "common/error.h"
#include "common/printable.h"
#include "model/hf_config.h"
#include "model/lora_builder.h"
#include "model/lora_load.h"
#include "model/safetensors.h"

namespace kvlm {
namespace {

// ordered_json: PEFT takes the first pattern that matches, in file order.
using OrderedJson = nlohmann::ordered_json;
namespace fs = std::filesystem;

struct PeftConfig {
  int64_t rank = 0;
  double alpha = 0;
  bool rslora = false;
  std::vector<std::pair<std::string, double>> rank_pattern, alpha_pattern;
};

OrderedJson read_json(const fs::path& file) {
  std::ifstream in(file);
  if (!in) throw_error(ErrorCode::kNotFound, "{}: missing (a PEFT LoRA folder needs it)", file.string());
  OrderedJson j = OrderedJson::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    throw_error(ErrorCode::kCorrupt, "{}: not a JSON object", file.string());
  return j;
}

// A field that must hold `want` for kvlm to apply the adapter as trained.
void refuse_unless(const OrderedJson& c, const std::string& file, const char* key, const OrderedJson& want, const char* what) {
  if (c.contains(key) && !c[key].is_null() && c[key] != want)
    throw_error(ErrorCode::kUnsupported, "{}: '{}' = {}: {} is not supported", file, key,
                printable(c[key].dump(), 100), what);
}

// rank_pattern / alpha_pattern: module-name suffix -> value.
std::vector<std::pair<std::string, double>> read_pattern(const OrderedJson& c, const std::string& file, const char* key) {
  std::vector<std::pair<std::string, double>> out;
  if (!c.contains(key) || c[key].is_null()) return out;
  if (!c[key].is_object()) throw_error(ErrorCode::kCorrupt, "{}: '{}' is not an object", file, key);
  for (const auto& [k, v] : c[key].items()) {
    if (!v.is_number() || v.get<double>() <= 0)
      throw_error(ErrorCode::kCorrupt, "{}: '{}' of '{}' is not a positive number", file, key, printable(k));
    // PEFT reads the keys as regular expressions; kvlm matches them as names.
    if (k.find_first_of("*+?[](){}|^$\\") != std::string::npos)
      throw_error(ErrorCode::kUnsupported, "{}: '{}' key '{}' is a regular expression; kvlm matches module names "
                  "and their dotted suffixes only", file, key, printable(k));
    out.emplace_back(k, v.get<double>());
  }
  return out;
}

PeftConfig read_peft_config(const fs::path& dir) {
  const std::string file = (dir / "adapter_config.json").string();
  const OrderedJson c = read_json(file);
  refuse_unless(c, file, "peft_type", "LORA", "a PEFT method other than LoRA");
  refuse_unless(c, file, "use_dora", false, "DoRA (weight-decomposed LoRA)");
  refuse_unless(c, file, "bias", "none", "training biases besides the LoRA pairs");
  refuse_unless(c, file, "lora_bias", false, "a bias on lora_B");
  if (c.contains("target_parameters") && !c["target_parameters"].is_null() && !c["target_parameters"].empty())
    throw_error(ErrorCode::kUnsupported, "{}: 'target_parameters' (LoRA on raw parameters such as experts) is not "
                "supported", file);
  PeftConfig out;
  if (!c.contains("r") || !c["r"].is_number_integer() || c["r"].get<int64_t>() <= 0)
    throw_error(ErrorCode::kCorrupt, "{}: 'r' must be a positive integer", file);
  out.rank = c["r"].get<int64_t>();
  if (!c.contains("lora_alpha") || !c["lora_alpha"].is_number())
    throw_error(ErrorCode::kCorrupt, "{}: 'lora_alpha' must be a number", file);
  out.alpha = c["lora_alpha"].get<double>();
  if (c.contains("use_rslora") && !c["use_rslora"].is_null()) {
    if (!c["use_rslora"].is_boolean()) throw_error(ErrorCode::kCorrupt, "{}: 'use_rslora' must be true or false", file);
    out.rslora = c["use_rslora"].get<bool>();
  }
  out.rank_pattern = read_pattern(c, file, "rank_pattern");
  out.alpha_pattern = read_pattern(c, file, "alpha_pattern");
  return out;
}

// PEFT's rule: the first key equal to the module's name or to a dotted suffix of it.
double pattern_value(const std::vector<std::pair<std::string, double>>& pattern, const std::string& module,
                     double fallback) {
  for (const auto& [key, value] : pattern)
    if (module == key || (module.ends_with(key) && module.size() > key.size() &&
                          module[module.size() - key.size() - 1] == '.'))
      return value;
  return fallback;
}

LoraMatrix read_matrix(const std::string& path, const SafetensorsTensor& t) {
  if (t.shape.size() != 2)
    throw_error(ErrorCode::kCorrupt, "{}: tensor '{}' has {} dimensions; a LoRA tensor is a matrix", path,
                printable(t.name), t.shape.size());
  LoraMatrix m;
  m.rows = t.shape[0];
  m.cols = t.shape[1];
  m.values.resize(static_cast<size_t>(t.num_elements()));
  dequantize_row(t.dtype, t.data, m.values.data(), t.num_elements());  // F32, F16 or BF16: one element a block
  return m;
}

// The base tensor a module's weight is, in GGUF's names ("" if none).
std::string gguf_name_of(const std::string& module, const ModelConfig& config) {
  const std::string weight = module + ".weight";
  if (config.arch == Arch::kGpt2) {
    const std::optional<Gpt2Name> g = gpt2_gguf_name(weight);
    return g ? g->name : "";
  }
  const std::optional<HfGgufName> m = hf_gguf_name(weight, config.arch_name);
  return m && m->expert < 0 ? m->name : "";
}

std::unique_ptr<SafetensorsFile> open_adapter_weights(const fs::path& dir) {
  const fs::path file = dir / "adapter_model.safetensors";
  std::error_code ec;
  if (!fs::exists(file, ec) && fs::exists(dir / "adapter_model.bin", ec))
    throw_error(ErrorCode::kUnsupported, "{}: only adapter_model.bin (a pickle) is there; kvlm reads "
                "adapter_model.safetensors (save with safe_serialization=True)", dir.string());
  return SafetensorsFile::open(file.string());
}

struct ModuleTensors {
  const SafetensorsTensor* a = nullptr;
  const SafetensorsTensor* b = nullptr;
};

std::map<std::string, ModuleTensors> group_modules(const SafetensorsFile& file, LoraBuilder& builder) {
  static const std::string kPrefix = "base_model.model.", kA = ".lora_A.weight", kB = ".lora_B.weight";
  std::map<std::string, ModuleTensors> modules;
  for (const SafetensorsTensor& t : file.tensors()) {
    const bool is_a = t.name.ends_with(kA), is_b = t.name.ends_with(kB);
    if (!t.name.starts_with(kPrefix) || (!is_a && !is_b) || t.name.size() <= kPrefix.size() + kA.size()) {
      builder.refuse(t.name);
      continue;
    }
    ModuleTensors& m = modules[t.name.substr(kPrefix.size(), t.name.size() - kPrefix.size() - kA.size())];
    (is_a ? m.a : m.b) = &t;
  }
  return modules;
}

}  // namespace

std::shared_ptr<const LoraAdapter> load_peft_lora(const std::string& dir, const GgufFile& base,
                                                  const ModelConfig& config, const Backend& backend, float user_scale,
                                                  DType dtype) {
  const PeftConfig c = read_peft_config(dir);
  const std::unique_ptr<SafetensorsFile> file = open_adapter_weights(dir);
  LoraBuilder builder(dir, base, config);
  for (const auto& [module, m] : group_modules(*file, builder)) {
    const auto at = lora_base_tensor(gguf_name_of(module, config), config);
    if (!at || !m.a || !m.b) {
      builder.refuse(!at ? module : fmt::format("{} (no {})", module, m.a ? "lora_B" : "lora_A"));
      continue;
    }
    const double rank = pattern_value(c.rank_pattern, module, static_cast<double>(c.rank));
    const double alpha = pattern_value(c.alpha_pattern, module, c.alpha);
    LoraMatrix a = read_matrix(file->path(), *m.a), b = read_matrix(file->path(), *m.b);
    if (static_cast<double>(a.rows) != rank)
      throw_error(ErrorCode::kCorrupt, "{}: '{}' has rank {} (lora_A's rows), but adapter_config.json gives it r = {}",
                  dir, module, a.rows, rank);
    const bool q = at->second == LoraTarget::kQ, k = at->second == LoraTarget::kK;
    const int64_t heads = q ? config.num_heads : config.num_kv_heads;
    // The base's rows are in GGUF's rotary order; B's rows must follow them.
    if (lora_permutes_qk(config) && (q || k) && b.rows == heads * config.head_dim && config.head_dim % 2 == 0)
      permute_qk_rows(b.values, b.rows, b.cols, heads, /*to_gguf=*/true);
    const double scale = user_scale * alpha / (c.rslora ? std::sqrt(rank) : rank);
    builder.add(module, at->first, at->second, std::move(a), std::move(b), static_cast<float>(scale));
  }
  return builder.finish(backend, dtype);
}

}  // namespace kvlm
