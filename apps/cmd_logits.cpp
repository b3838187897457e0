// kvlm logits -m MODEL --tokens 1,2,3: feeds the ids one at a time (teacher
// forcing) and prints {"tokens":[...],"logits":[[...],...]}, the full logits
// row after each token — the shape of the goldens in ../shared/golden.
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "apps/cli_parse.h"
#include "apps/commands.h"
#include "apps/engine_options.h"
#include "apps/lora_options.h"
#include "backend/threads.h"
#include "common/error.h"
#include "model/model.h"
#include "model/quantize_tensors.h"
#include "runner/sequence_evaluator.h"

namespace kvlm::apps {
namespace {

std::vector<int32_t> parse_ids(const std::string& text, int32_t vocab_size) {
  std::vector<int32_t> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    long v = -1;
    try {
      v = std::stol(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || item.empty())
      throw_error(ErrorCode::kInvalidArgument, "--tokens: '{}' is not a token id", item);
    if (v < 0 || v >= vocab_size)
      throw_error(ErrorCode::kInvalidArgument, "--tokens: id {} is outside the vocabulary [0, {})", v, vocab_size);
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty()) throw_error(ErrorCode::kInvalidArgument, "--tokens: no ids given");
  return ids;
}

}  // namespace

int cmd_logits(int argc, char** argv) {
  CLI::App app{"Print the logits after each of the given token ids (teacher forcing)", "kvlm logits"};
  std::string model_path, tokens_arg, kv_type = "f16";  // llama.cpp's default, as the goldens use
  int threads = 0;
  bool batched = false;
  app.add_option("-m,--model", model_path, "GGUF model file or Hugging Face checkpoint folder")->required();
  app.add_option("--tokens", tokens_arg, "comma-separated token ids")->required();
  app.add_option("-t,--threads", threads, "compute threads (default: all cores)");
  app.add_option("--kv-type", kv_type, "KV cache type: f16, bf16, f32, q8_0, q4_0")->capture_default_str();
  std::string quantize;
  app.add_option("--quantize", quantize, "convert the weights while loading: q8_0, q4_0, q4_k");
  LoraFlags loras;
  add_lora_options(app, loras, "LoRA adapter FILE[:SCALE]: a PEFT folder or a GGUF LoRA (repeatable: applied together)");
  app.add_flag("--batched", batched, "feed all ids in one forward pass instead of one at a time");
  KVLM_PARSE(app, argc, argv);

  set_num_threads(threads);
  ModelLoadOptions load_options;
  if (!quantize.empty()) load_options.quantize = parse_weight_type(quantize, /*floats_too=*/false);
  auto model = Model::load(model_path, load_options);
  const DType kv_dtype = parse_kv_type(kv_type);
  const int32_t vocab = model->config().vocab_size;
  std::vector<int32_t> ids = parse_ids(tokens_arg, vocab);

  SequenceEvaluator eval(*model, static_cast<int32_t>(ids.size()), kv_dtype);
  eval.set_lora(load_stacked_loras(loras, *model));
  std::vector<float> all;
  if (batched) {
    all = eval.eval(ids, /*all_logits=*/true);
  } else {
    for (int32_t id : ids) {
      const auto& row = eval.eval(std::span<const int32_t>(&id, 1), /*all_logits=*/false);
      all.insert(all.end(), row.begin(), row.end());
    }
  }
  std::string out = fmt::format("{{\"tokens\":[{}],\"logits\":[", fmt::join(ids, ","));
  size_t num_nonfinite = 0;
  for (size_t r = 0; r < ids.size(); ++r) {
    out += r ? ",[" : "[";
    for (int32_t i = 0; i < vocab; ++i) {
      // JSON has no NaN or Infinity: such a logit is written as null.
      const float x = all[r * vocab + i];
      if (!std::isfinite(x)) ++num_nonfinite;
      if (i) out += ',';
      if (std::isfinite(x)) fmt::format_to(std::back_inserter(out), "{}", x);
      else out += "null";
    }
    out += "]";
  }
  out += "]}\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  if (num_nonfinite > 0)
    fmt::print(stderr, "warning: {} of {} logits are NaN or infinite (written as null): the model's activations "
               "overflowed or its weights are broken\n", num_nonfinite, all.size());
  return 0;
}

}  // namespace kvlm::apps
