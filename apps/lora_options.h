// --lora for the commands (docs/lora.md): `kvlm run|logits|perplexity --lora
// FILE[:SCALE]` (repeatable: applied together, as llama.cpp's), and
// `kvlm serve --lora [NAME=]PATH[:SCALE]` (repeatable: each a model a request
// may name).
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace CLI {
class App;
}  // namespace CLI

namespace kvlm {
class Model;
struct LoraAdapter;
struct ServedLora;
}  // namespace kvlm

namespace kvlm::apps {

struct LoraSpec {
  std::string name;  // serve: the model name requests use (default: the file's or folder's name)
  std::string path;  // a PEFT folder or a GGUF LoRA file
  float scale = 1.0f;
};

// The adapters' flags: their specs and the type their matrices are held in
// (--lora-type f16 by default: half the bytes a decode step reads per
// adapter; f32 gives the merged model's logits exactly).
struct LoraFlags {
  std::vector<std::string> specs;
  std::string type = "f16";
};

// "[NAME=]PATH[:SCALE]" (NAME= only when `named`); a trailing ":X" is a
// scale when X is a number. Throws Error(kInvalidArgument) for a bad one.
LoraSpec parse_lora_spec(const std::string& text, bool named);

// The adapter of `spec` on `model`'s base, held as `type`; throws what
// load_lora throws (and Error(kInvalidArgument) for another type).
std::shared_ptr<const LoraAdapter> load_lora_spec(const LoraSpec& spec, const Model& model, const std::string& type);

// --lora-type (both forms) and, with `repeat_help`, --lora with that help.
void add_lora_options(CLI::App& app, LoraFlags& flags, const std::string& lora_help);

// run, logits: every --lora loaded and stacked into one adapter (null for none).
std::shared_ptr<const LoraAdapter> load_stacked_loras(const LoraFlags& flags, const Model& model);

// serve: each --lora loaded under its name.
std::vector<ServedLora> load_served_loras(const LoraFlags& flags, const Model& model);

}  // namespace kvlm::apps
