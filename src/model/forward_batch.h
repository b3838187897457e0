// What one forward pass computes: every scheduled token of every sequence in
// the step, flattened into T rows (docs/ARCHITECTURE.md "The life of a
// request"). Plain data built by the runner; the model only reads it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/cpu/attention.h"

namespace kvlm {

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
};

// KV storage as the model sees it: one layout and a K/V base pair per layer.
struct KvCacheView {
  KvLayout layout;
  std::vector<KvLayer> layers;       // [num_layers]
  std::vector<int32_t> layer_group;  // [num_layers] index into ForwardBatch::groups
};

}  // namespace kvlm
