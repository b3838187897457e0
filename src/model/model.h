// A loaded model: configuration, weights (views into the memory-mapped GGUF)
// and a forward pass batched over tokens. One subclass per architecture
// family, each a straight-line forward pass in its own file.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"
#include "model/forward_batch.h"
#include "model/gguf.h"
#include "model/lora_apply.h"
#include "model/moe.h"

namespace kvlm {

// Activation buffers reused across steps (grown on demand, never shrunk),
// and the counters of the last forward pass that used them.
struct ForwardScratch {
  std::vector<float> x, xn, q, k, v, attn, h1, h2, out_rows;
  std::vector<float> hidden;  // [hidden_rows, dim]: ForwardBatch::hidden_rows' final hidden states
  MoeScratch moe;
  MoeStats moe_stats;  // reset by each forward pass of a model with experts
  std::vector<AttentionSeq> layer_seq_buffer;  // layer_seqs() with per-layer statistics
  LoraScratch lora;
};

struct ModelLoadOptions {
  // The longest sequence this process will run, in tokens (0: the model's
  // trained context). Phi-3's long-rope picks its long or short factors by
  // it, as llama.cpp does by its context per sequence.
  int32_t max_context = 0;
  // --quantize: the matrices converted to this type while loading
  // (model/quantize_tensors.h); unset: used as stored.
  std::optional<DType> quantize;
  // The backend that runs the forward pass and holds the prepared weights;
  // nullptr: default_backend(). Must outlive the model.
  const Backend* backend = nullptr;
};

class Model {
 public:
  // Reads the architecture from the file and loads the matching family.
  // Throws Error(kUnsupported) for an unknown architecture, Error(kCorrupt)
  // for missing or mis-shaped tensors.
  static std::unique_ptr<Model> load(std::unique_ptr<GgufFile> gguf, const ModelLoadOptions& options = {});
  // `path`: a GGUF file or a Hugging Face checkpoint folder (model/hf_checkpoint.h).
  static std::unique_ptr<Model> load(const std::string& path, const ModelLoadOptions& options = {});
  virtual ~Model() = default;

  const ModelConfig& config() const { return config_; }
  const GgufFile& gguf() const { return *gguf_; }
  // The backend its weights were prepared by (an adapter's matrices must be too).
  const Backend& backend() const { return backend_; }
  // Layer groups that share block tables (one for most models).
  virtual std::vector<KvGroupSpec> kv_groups() const;
  // Positions the model can encode at most (GPT-2's learned table); nullopt
  // when positions are rotary and only the KV memory limits the context.
  virtual std::optional<int32_t> max_positions() const { return std::nullopt; }
  // Whether forward() runs KV chunks' probes (ForwardBatch::num_layers and
  // kv_deviation) and its keys can be re-rotated to a new position: rotary
  // positions, one KV group, no window.
  virtual bool blends_kv_chunks() const { return false; }

  // Runs the layers over batch.tokens, writing each token's K/V into its slot
  // and attending through the block tables. logits: [logit_rows.size(), vocab_size].
  virtual void forward(const ForwardBatch& batch, const KvCacheView& kv, ForwardScratch& scratch,
                       float* logits) const = 0;

 protected:
  Model(std::unique_ptr<GgufFile> gguf, ModelConfig config, const Backend& backend)
      : gguf_(std::move(gguf)), config_(std::move(config)), backend_(backend) {}
  // Adds the step's LoRA adapters' share to the base's output of (layer,
  // target): model/lora_apply.h. Nothing when no row has an adapter.
  void add_lora(const ForwardBatch& batch, int32_t layer, LoraTarget target, const float* x, int64_t in, float* y,
                int64_t out, ForwardScratch& s) const {
    if (!batch.lora.empty()) apply_lora(backend_, batch.lora, layer, target, x, in, y, out, s.lora);
  }
  std::unique_ptr<GgufFile> gguf_;  // owns the mapping the weights point into
  ModelConfig config_;
  const Backend& backend_;  // every op of the forward pass; its weights were prepared by it
};

// out = the rows of x ([T, dim]) listed in `rows`, in order: [rows.size(), dim].
// The model head runs only on the rows whose logits are wanted.
void gather_rows(const std::vector<float>& x, std::span<const int32_t> rows, int64_t dim, std::vector<float>& out);

// Family constructors (one file each).
// llama.cpp: llama, Mistral, Mixtral, Qwen2, Qwen2-MoE, Qwen3, Qwen3-MoE, Phi-3.
std::unique_ptr<Model> load_llama(std::unique_ptr<GgufFile> gguf, ModelConfig config, const ModelLoadOptions& options,
                                  const Backend& backend);
std::unique_ptr<Model> load_gpt2(std::unique_ptr<GgufFile> gguf, ModelConfig config, const Backend& backend);
std::unique_ptr<Model> load_gemma2(std::unique_ptr<GgufFile> gguf, ModelConfig config, const Backend& backend);

}  // namespace kvlm
