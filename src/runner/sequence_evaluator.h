// Runs a model over one sequence without the engine: a private KV storage
// whose blocks hold the sequence in order (group g of a multi-group model
// gets its own run of blocks: groups share storage rows, never block ids). For tools that score
// text (kvlm logits, kvlm perplexity) and for tests that need a reference run
// to compare the engine against.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/model.h"
#include "runner/kv_storage.h"

namespace kvlm {

class SequenceEvaluator {
 public:
  // Room for max_tokens tokens of one sequence.
  SequenceEvaluator(const Model& model, int32_t max_tokens, DType kv_dtype = DType::kF16,
                    int32_t block_size = 16);

  // Forgets the sequence; the next eval starts at position 0.
  void reset() { num_tokens_ = 0; }
  // Keeps the first num_tokens tokens (0 <= num_tokens <= num_tokens()); the
  // next eval appends after them and overwrites the KV of the rest. Lets a
  // benchmark measure at a fixed context depth without prefilling it again.
  void rewind(int32_t num_tokens);
  int32_t num_tokens() const { return num_tokens_; }

  // Appends `tokens` (one batched forward pass) and returns their logits:
  // every row ([tokens.size(), vocab]) if all_logits, else the last row only.
  // Throws Error(kOutOfRange) if the sequence would exceed max_tokens.
  const std::vector<float>& eval(std::span<const int32_t> tokens, bool all_logits);
  // Runs every later eval with `adapter` (null: the base alone). The KV of
  // tokens already evaluated stays as it was computed: reset() first.
  void set_lora(std::shared_ptr<const LoraAdapter> adapter) { lora_ = std::move(adapter); }
  // The experts' work in the last eval (empty for a dense model).
  const MoeStats& moe_stats() const { return scratch_.moe_stats; }
  // The last eval's final hidden states (after the model's last norm), one
  // row per logits row: [rows, dim]. A reference for embeddings.
  const std::vector<float>& hidden() const { return scratch_.hidden; }

 private:
  const Model& model_;
  KvStorage storage_;
  int32_t max_tokens_;
  int32_t num_tokens_ = 0;
  std::vector<std::vector<int32_t>> block_tables_;  // [group]: disjoint blocks per group
  ForwardScratch scratch_;
  std::vector<float> logits_;
  std::shared_ptr<const LoraAdapter> lora_;
};

}  // namespace kvlm
