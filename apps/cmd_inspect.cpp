// kvlm inspect -m MODEL: the GGUF header, every metadata value and the tensor table.
#include <cstdio>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "apps/cli_parse.h"
#include "apps/commands.h"
#include "common/error.h"
#include "model/config.h"
#include "model/gguf.h"
#include "model/hf_checkpoint.h"
#include "tokenizer/tokenizer.h"

namespace kvlm::apps {

int cmd_inspect(int argc, char** argv) {
  CLI::App app{"Print a GGUF file's metadata and tensor table", "kvlm inspect"};
  std::string model_path;
  size_t max_items = 8;
  app.add_option("-m,--model", model_path, "GGUF model file or Hugging Face checkpoint folder")->required();
  app.add_option("--max-array-items", max_items, "array items shown per metadata value");
  KVLM_PARSE(app, argc, argv);

  auto gguf = open_model_file(model_path);
  fmt::print("file: {}\nsize: {} bytes\ngguf version: {}\nalignment: {}\ndata offset: {}\n",
             gguf->path(), gguf->file_size(), gguf->version(), gguf->alignment(), gguf->data_offset());
  fmt::print("\nmetadata ({} keys):\n", gguf->metadata().entries().size());
  for (const auto& [key, value] : gguf->metadata().entries()) {
    std::string_view type = meta_type_name(value.type);
    fmt::print("  {:<44} {:<6} {}\n", key, type, value.to_string(max_items));
  }
  size_t total_bytes = 0;
  fmt::print("\ntensors ({}):\n", gguf->tensors().size());
  for (const auto& t : gguf->tensors()) {
    fmt::print("  {:<36} {:<5} {:<18} {:>12} bytes  @ {}\n", t.name, dtype_name(t.dtype),
               t.shape_string(), t.num_bytes, gguf->data_offset() + t.offset);
    total_bytes += t.num_bytes;
  }
  fmt::print("\ntotal tensor bytes: {} ({:.2f} MiB)\n", total_bytes, total_bytes / 1048576.0);

  // What the loaders make of it.
  const Metadata& m = gguf->metadata();
  int status = 0;
  if (m.has("general.architecture")) {
    try {
      fmt::print("\nmodel:\n{}", ModelConfig::from_metadata(m).describe());
    } catch (const Error& e) {
      fmt::print("\nmodel: {}\n", e.what());
      status = 1;
    }
  }
  if (m.has("tokenizer.ggml.model")) {
    try {
      auto tok = Tokenizer::from_metadata(m);
      const Vocab& v = tok->vocab();
      auto id = [&](std::optional<int32_t> t) { return t ? fmt::format("{} {}", *t, tok->piece(*t)) : std::string("none"); };
      const bool bpe = v.model_name() == "gpt2";
      fmt::print("\ntokenizer: {} ({}), {} tokens{}\n", v.model_name(), bpe ? "byte-level BPE" : "SentencePiece",
                 tok->vocab_size(), bpe ? fmt::format(", pre-tokenizer {}", v.pre_type().name) : "");
      fmt::print("bos: {} | eos: {} | add bos: {} | add eos: {}\n", id(tok->bos_id()), id(tok->eos_id()),
                 tok->add_bos(), tok->add_eos());
      std::string eog;
      for (int32_t t = 0; t < tok->vocab_size(); ++t)
        if (tok->is_end_of_generation(t)) eog += fmt::format("{}{} {}", eog.empty() ? "" : ", ", t, tok->piece(t));
      fmt::print("end of generation: {}\n", eog.empty() ? "none" : eog);
      fmt::print("chat template: {}\n", m.has("tokenizer.chat_template") ? "yes" : "no");
    } catch (const Error& e) {
      fmt::print("\ntokenizer: {}\n", e.what());
      status = 1;
    }
  }
  return status;
}

}  // namespace kvlm::apps
