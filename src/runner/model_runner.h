// Turns a SchedulerOutput into one batched forward pass: token ids, positions,
// the slot of each token in each KV group, and per-sequence block tables; owns
// the KV storage tensors. Weights are read once per step for all sequences.
// The block tables are its own copy (BlockTableMirror), kept from the changes
// each output carries: a long sequence's table does not travel every step.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/model.h"
#include "runner/kv_storage.h"
#include "sched/scheduler.h"

namespace kvlm {

class ModelRunner {
 public:
  ModelRunner(const Model& model, DType kv_dtype, int32_t block_size, int32_t num_blocks);

  // Runs the step. Returns the logits rows, [rows, vocab], in the order of
  // out.seqs: for each seq its num_prompt_logits prompt rows, then its
  // sampling rows if sample == true (1 + num_spec_tokens: the last known
  // token's, then each proposal's). Valid until the next call.
  // First runs out.kv_ops (evictions' byte work), in order.
  std::span<const float> execute(const SchedulerOutput& out);
  // What the last execute() observed for KV policies, one entry per seq of
  // its output (entries empty for seqs that collect nothing).
  std::span<const SeqKvStats> kv_stats() const { return kv_stats_; }
  // The last execute()'s attention of seq i (collect_attention) per KV head,
  // before kv_stats() averages the heads: [new tokens][num_kv_heads][context],
  // each the sum over layers and the KV head's query heads; with
  // set_attention_per_layer(true), [num_layers] of those, one per layer
  // (bench kv --head-analysis).
  std::span<const float> attention_per_kv_head(size_t i) const { return raw_attention_[i]; }
  void set_attention_per_layer(bool on) { attention_per_layer_ = on; }
  // The last execute()'s final hidden states, [rows, dim], in the order of
  // out.seqs: each seq's num_hidden_rows rows (embedding requests).
  std::span<const float> hidden() const { return scratch_.hidden; }

  const KvStorage& storage() const { return storage_; }
  // For KV tier loads, between steps (engine thread).
  KvStorage& storage() { return storage_; }
  const Model& model() const { return model_; }

 private:
  // Rows [begin, begin + n) run with `adapter` this step.
  void add_adapter_rows(const LoraAdapter* adapter, int32_t begin, int32_t n);
  // Seq s's AttentionSeq(s) for one group: one, or a blend's one per run of
  // consecutive positions.
  static void add_attention_seqs(const ScheduledSeq& s, int32_t begin, std::span<const int32_t> table, float* stats,
                                 std::vector<AttentionSeq>& seqs);
  const Model& model_;
  KvStorage storage_;
  ForwardScratch scratch_;
  // Batch buffers, reused across steps.
  std::vector<int32_t> tokens_, positions_, logit_rows_, hidden_rows_;
  // The step's rows of each LoRA adapter in it (ForwardBatch::lora).
  std::vector<std::pair<const LoraAdapter*, std::vector<int32_t>>> adapter_rows_;
  std::vector<LoraRows> lora_;
  std::vector<std::vector<int64_t>> slots_;          // [group][T]
  std::vector<std::vector<AttentionSeq>> seqs_;      // [group][num seqs]
  std::vector<float> logits_;
  std::vector<float> deviation_;  // [T] a probe step's (ForwardBatch::kv_deviation)
  std::vector<std::vector<float>> raw_attention_;  // [seq][T_seq * kv_heads * context]
  std::vector<SeqKvStats> kv_stats_;
  std::vector<std::vector<int32_t>> group_layers_;  // [group] layer indices
  BlockTableMirror tables_;
  bool attention_per_layer_ = false;
  std::vector<float> entropy_row_;  // entropy_of's softmax, reused                          // every running request's, from the changes

  void run_kv_ops(const KvOps& ops);
  void collect_stats(const SchedulerOutput& out);
  // A probe step's deviations into each seq's kv_stats_.
  void collect_deviation(const SchedulerOutput& out);
};

}  // namespace kvlm
