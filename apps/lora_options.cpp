#include "apps/lora_options.h"

#include <cstdlib>
#include <ctime>
#include <filesystem>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "backend/dtype.h"
#include "common/error.h"
#include "common/log.h"
#include "model/lora.h"
#include "model/lora_load.h"
#include "model/model.h"
#include "server/lora_registry.h"

namespace kvlm::apps {

LoraSpec parse_lora_spec(const std::string& text, bool named) {
  LoraSpec spec;
  std::string rest = text;
  if (named) {
    // NAME=PATH; a path may hold '=' only after a '/'.
    const size_t eq = rest.find('=');
    if (eq != std::string::npos && rest.find('/') > eq) {
      spec.name = rest.substr(0, eq);
      rest = rest.substr(eq + 1);
    }
  }
  const size_t colon = rest.rfind(':');
  if (colon != std::string::npos) {
    const std::string tail = rest.substr(colon + 1);
    char* end = nullptr;
    const float scale = std::strtof(tail.c_str(), &end);
    if (!tail.empty() && end == tail.c_str() + tail.size()) {
      spec.scale = scale;
      rest = rest.substr(0, colon);
    }
  }
  if (rest.empty()) throw_error(ErrorCode::kInvalidArgument, "--lora {}: no adapter path", text);
  spec.path = rest;
  if (named && spec.name.empty()) {
    std::filesystem::path p(spec.path);
    spec.name = (p.has_filename() ? p : p.parent_path()).stem().string();
  }
  return spec;
}

std::shared_ptr<const LoraAdapter> load_lora_spec(const LoraSpec& spec, const Model& model, const std::string& type) {
  const std::optional<DType> dtype = dtype_from_name(type);
  if (!dtype || (*dtype != DType::kF32 && *dtype != DType::kF16 && *dtype != DType::kBF16))
    throw_error(ErrorCode::kInvalidArgument, "--lora-type {}: f32, f16 or bf16", type);
  auto adapter = load_lora(spec.path, model.gguf(), model.config(), model.backend(), spec.scale, *dtype);
  log_info("LoRA adapter {}: rank {}, {:.1f} MiB as {}, scale {}", spec.path, adapter->max_rank,
           adapter->num_bytes / 1048576.0, type, spec.scale);
  return adapter;
}

void add_lora_options(CLI::App& app, LoraFlags& flags, const std::string& lora_help) {
  app.add_option("--lora", flags.specs, lora_help);
  app.add_option("--lora-type", flags.type, "the type LoRA matrices are held in: f16, bf16, or f32 (exact)")
      ->capture_default_str();
}

std::shared_ptr<const LoraAdapter> load_stacked_loras(const LoraFlags& flags, const Model& model) {
  if (flags.specs.empty()) return nullptr;
  std::vector<std::shared_ptr<const LoraAdapter>> adapters;
  for (const std::string& s : flags.specs)
    adapters.push_back(load_lora_spec(parse_lora_spec(s, false), model, flags.type));
  return stack_loras(adapters, model.backend());
}

std::vector<ServedLora> load_served_loras(const LoraFlags& flags, const Model& model) {
  std::vector<ServedLora> out;
  for (const std::string& s : flags.specs) {
    const LoraSpec spec = parse_lora_spec(s, true);
    for (const ServedLora& other : out)
      if (other.name == spec.name)
        throw_error(ErrorCode::kInvalidArgument, "--lora {}: another adapter is named '{}'", s, spec.name);
    out.push_back({spec.name, spec.path, load_lora_spec(spec, model, flags.type),
                   static_cast<int64_t>(std::time(nullptr))});
  }
  return out;
}

}  // namespace kvlm::apps
