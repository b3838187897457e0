// kvlm convert DIR -o FILE.gguf [--type T]: a Hugging Face checkpoint folder
// (or a GGUF file) written as GGUF, through the loader `-m DIR` uses, so the
// file holds exactly the model kvlm runs from the folder.
// --merge-lora ADAPTER[:SCALE] writes it with one LoRA adapter merged into
// its matrices (model/lora_merge.h).
#include <chrono>
#include <cmath>
#include <cstdlib>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "apps/cli_parse.h"
#include "apps/commands.h"
#include "backend/backend.h"
#include "common/error.h"
#include "model/config.h"
#include "model/gguf_writer.h"
#include "model/hf_checkpoint.h"
#include "model/lora_load.h"
#include "model/lora_merge.h"
#include "model/quantize_tensors.h"

namespace kvlm::apps {
namespace {

// "ADAPTER[:SCALE]": the scale after the last ':' when it reads as a number
// (a path may hold ':' too).
std::pair<std::string, float> adapter_and_scale(const std::string& spec) {
  const size_t colon = spec.rfind(':');
  if (colon != std::string::npos && colon + 1 < spec.size()) {
    const std::string tail = spec.substr(colon + 1);
    char* end = nullptr;
    const float scale = std::strtof(tail.c_str(), &end);
    if (end == tail.c_str() + tail.size() && std::isfinite(scale)) return {spec.substr(0, colon), scale};
  }
  return {spec, 1.0f};
}

// The base with the adapter merged: W + scale * B A in F32 for its matrices.
std::unique_ptr<GgufFile> with_lora_merged(std::unique_ptr<GgufFile> base, const std::string& spec) {
  const auto [path, scale] = adapter_and_scale(spec);
  const ModelConfig config = ModelConfig::from_metadata(base->metadata());
  const auto adapter = load_lora(path, *base, config, default_backend(), scale);
  fmt::print(stderr, "merging {} (scale {}, rank up to {})\n", path, scale, adapter->max_rank);
  return merge_lora(std::move(base), *adapter);
}

}  // namespace

int cmd_convert(int argc, char** argv) {
  CLI::App app{"Write a Hugging Face checkpoint folder as a GGUF file", "kvlm convert"};
  std::string in_path, out_path, type_name;
  app.add_option("model", in_path, "Hugging Face checkpoint folder (or GGUF file)")->required();
  app.add_option("-o,--out", out_path, "GGUF file to write")->required();
  app.add_option("--type", type_name, "matrices in f32, f16, bf16, q8_0, q4_0 or q4_k (default: as stored)");
  std::string lora;
  app.add_option("--merge-lora", lora, "ADAPTER[:SCALE]: merge this LoRA adapter (PEFT folder or GGUF) into the "
                 "matrices it adapts (written F32 unless --type)");
  KVLM_PARSE(app, argc, argv);

  const auto start = std::chrono::steady_clock::now();
  std::optional<DType> type;
  if (!type_name.empty()) type = parse_weight_type(type_name, /*floats_too=*/true);
  std::unique_ptr<GgufFile> model = open_model_file(in_path);
  if (!lora.empty()) model = with_lora_merged(std::move(model), lora);
  auto gguf = convert_tensors(std::move(model), type);
  ModelConfig::from_metadata(gguf->metadata());  // refuse what kvlm could not load before writing it
  GgufWriter w;
  for (const auto& [key, value] : gguf->metadata().entries()) w.set(key, value);
  for (const GgufTensor& t : gguf->tensors()) w.declare_tensor(t.name, t.dims, t.dtype);
  const uint64_t bytes = w.write_streaming(out_path, [&](size_t index, const GgufWriter::ByteSinkFn& sink) {
    for (const auto& [data, size] : gguf->tensors()[index].byte_ranges()) sink(data, size);
  });
  fmt::print(stderr, "wrote {}: {} tensors, {:.1f} MiB in {:.1f} s\n", out_path, gguf->tensors().size(),
             bytes / 1048576.0, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return 0;
}

}  // namespace kvlm::apps
