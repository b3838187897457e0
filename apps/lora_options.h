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

// "[NAME=]PATH[:SCALE]" (NAME= only when `named`); a trailing ":X" is a
// scale when X is a number. Throws Error(kInvalidArgument) for a bad one.
LoraSpec parse_lora_spec(const std::string& text, bool named);

// The adapter of `spec` on `model`'s base; throws what load_lora throws.
std::shared_ptr<const LoraAdapter> load_lora_spec(const LoraSpec& spec, const Model& model);

// run, logits, perplexity: every --lora loaded and stacked into one adapter
// (null for none).
void add_lora_option(CLI::App& app, std::vector<std::string>& specs);
std::shared_ptr<const LoraAdapter> load_stacked_loras(const std::vector<std::string>& specs, const Model& model);

// serve: each --lora loaded under its name.
std::vector<ServedLora> load_served_loras(const std::vector<std::string>& specs, const Model& model);

}  // namespace kvlm::apps
