// What one forward pass computes: every scheduled token of every sequence in
// the step, flattened into T rows (docs/ARCHITECTURE.md "The life of a
// request"). Plain data built by the runner; the model only reads it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/kv_layout.h"

namespace kvlm {

struct LoraAdapter;  // model/lora.h

// The rows of a step whose sequences use one LoRA adapter (model/lora_apply.h).
struct LoraRows {
  const LoraAdapter* adapter = nullptr;
  std::span<const int32_t> rows;  // rows of T, ascending
};

// A KV group is a set of layers that share block tables. Most models have one;
// Gemma-2 has two (full-attention layers and sliding-window layers), because
// the window layers free blocks that fall out of their window.
struct KvGroupSpec {
  int32_t window = 0;            // 0: full attention
  std::vector<int32_t> layers;   // model layers in this group, ascending
};

// Per-group view of the step: where each token's K/V goes, and each
// sequence's block table for that group.
struct KvGroupBatch {
  std::span<const int64_t> slots;        // [T] physical slot of each token
  std::span<const AttentionSeq> seqs;    // one per sequence, same order in every group
};

struct ForwardBatch {
  std::span<const int32_t> tokens;       // [T] token ids
  std::span<const int32_t> positions;    // [T] position of each token in its sequence
  std::span<const KvGroupBatch> groups;  // [num_groups]
  std::span<const int32_t> logit_rows;   // rows of T whose logits are wanted, in output order
  // Rows of T whose final hidden state (after the last norm, before the
  // head) is wanted, in output order: ForwardScratch::hidden (embeddings).
  std::span<const int32_t> hidden_rows;
  // > 0: layer l adds its attention statistics at each seq's attn_stats +
  // l * attn_stats_layer_stride (per-layer analysis, bench kv --head-analysis)
  // instead of every layer adding into the same rows.
  size_t attn_stats_layer_stride = 0;
  // The rows that run with a LoRA adapter, one entry per adapter in the
  // step; rows in none run the base alone. Empty: no adapter in the step.
  std::span<const LoraRows> lora{};
  // > 0: a KV chunks probe (kv/kv_chunks.h): only layers [0, num_layers)
  // run, writing their K and V; no logits, no hidden rows. On the last of
  // them, before its write, kv_deviation[t] gets row t's distance between
  // its new K/V and those its slot held (Backend::kv_deviation).
  int32_t num_layers = 0;
  std::span<float> kv_deviation{};
};

// The seqs layer l attends with: group.seqs, or with per-layer statistics a
// copy in `buffer` whose attn_stats point at layer l's rows.
inline std::span<const AttentionSeq> layer_seqs(const ForwardBatch& batch, const KvGroupBatch& group, int32_t l,
                                                std::vector<AttentionSeq>& buffer) {
  if (batch.attn_stats_layer_stride == 0) return group.seqs;
  buffer.assign(group.seqs.begin(), group.seqs.end());
  for (AttentionSeq& seq : buffer)
    if (seq.attn_stats) seq.attn_stats += static_cast<size_t>(l) * batch.attn_stats_layer_stride;
  return buffer;
}

// KV storage as the model sees it: one layout and a K/V base pair per layer.
struct KvCacheView {
  KvLayout layout;
  std::vector<KvLayer> layers;       // [num_layers]
  std::vector<int32_t> layer_group;  // [num_layers] index into ForwardBatch::groups
};

}  // namespace kvlm
