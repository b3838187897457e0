// kvlm convert DIR -o FILE.gguf [--type T]: a Hugging Face checkpoint folder
// (or a GGUF file) written as GGUF, through the loader `-m DIR` uses, so the
// file holds exactly the model kvlm runs from the folder.
#include <chrono>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "apps/cli_parse.h"
#include "apps/commands.h"
#include "common/error.h"
#include "model/config.h"
#include "model/gguf_writer.h"
#include "model/hf_checkpoint.h"
#include "model/quantize_tensors.h"

namespace kvlm::apps {

int cmd_convert(int argc, char** argv) {
  CLI::App app{"Write a Hugging Face checkpoint folder as a GGUF file", "kvlm convert"};
  std::string in_path, out_path, type_name;
  app.add_option("model", in_path, "Hugging Face checkpoint folder (or GGUF file)")->required();
  app.add_option("-o,--out", out_path, "GGUF file to write")->required();
  app.add_option("--type", type_name, "matrices in f32, f16, bf16, q8_0, q4_0 or q4_k (default: as stored)");
  KVLM_PARSE(app, argc, argv);

  const auto start = std::chrono::steady_clock::now();
  std::optional<DType> type;
  if (!type_name.empty()) type = parse_weight_type(type_name, /*floats_too=*/true);
  auto gguf = convert_tensors(open_model_file(in_path), type);
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
