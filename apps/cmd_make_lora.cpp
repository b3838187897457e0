// kvlm make-lora -m BASE -o OUT --format peft|gguf --rank 16 --alpha 32
// --targets attn --seed N: a random-weight LoRA adapter for a base model, in
// PEFT's or llama.cpp's format, to test and benchmark adapters without a
// trained one.
#include <chrono>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "apps/cli_parse.h"
#include "apps/commands.h"
#include "common/error.h"
#include "model/make_lora.h"

namespace kvlm::apps {

int cmd_make_lora(int argc, char** argv) {
  CLI::App app{"Write a random-weight LoRA adapter for a base model (PEFT folder or GGUF LoRA)", "kvlm make-lora"};
  MakeLoraOptions o;
  std::string format = "peft", dtype = "f32";
  app.add_option("-m,--model", o.base_path, "base model (GGUF file or Hugging Face folder)")->required();
  app.add_option("-o,--output", o.out_path, "output: a folder (peft) or a .gguf file (gguf)")->required();
  app.add_option("--format", format, "peft (adapter_config.json + adapter_model.safetensors) or gguf (llama.cpp's)")
      ->capture_default_str();
  app.add_option("--rank", o.rank, "LoRA rank r")->capture_default_str();
  app.add_option("--alpha", o.alpha, "lora_alpha: the scale is alpha / r (alpha / sqrt(r) with --rslora)")
      ->capture_default_str();
  app.add_option("--targets", o.targets, "attn, all, or a comma list of GGUF names (attn_q,attn_v,ffn_down,...)")
      ->capture_default_str();
  app.add_option("--seed", o.seed, "random seed (same seed, same bytes)")->capture_default_str();
  app.add_flag("--rslora", o.rslora, "rank-stabilised LoRA: scale alpha / sqrt(r)");
  app.add_option("--dtype", dtype, "tensor type: f32, f16 or bf16")->capture_default_str();
  app.add_option("--scale-init", o.b_std, "standard deviation of lora_B (PEFT starts it at 0; nonzero shows an effect)")
      ->capture_default_str();
  KVLM_PARSE(app, argc, argv);

  if (format != "peft" && format != "gguf")
    throw_error(ErrorCode::kInvalidArgument, "--format '{}' is not peft or gguf", format);
  o.format = format == "peft" ? LoraFormat::kPeft : LoraFormat::kGguf;
  const std::optional<DType> type = dtype_from_name(dtype);
  if (!type || (*type != DType::kF32 && *type != DType::kF16 && *type != DType::kBF16))
    throw_error(ErrorCode::kInvalidArgument, "--dtype '{}' is not f32, f16 or bf16", dtype);
  o.dtype = *type;

  const auto start = std::chrono::steady_clock::now();
  const MakeLoraResult r = make_lora(o);
  std::vector<std::string_view> names;
  for (LoraTarget t : r.targets) names.push_back(lora_target_gguf_name(t));
  fmt::print(stderr, "make-lora: wrote {} ({}, rank {}, {} pairs on {}, {:.1f} MiB) in {:.1f} s\n", o.out_path, format,
             o.rank, r.num_pairs, fmt::join(names, ", "), r.num_bytes / 1048576.0,
             std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return 0;
}

}  // namespace kvlm::apps
