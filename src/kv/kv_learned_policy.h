// The oracle and the learned KV policies (kv_policy.h, docs/kv-budgets.md).
//
// oracle: offline only. A first pass runs the text with the full cache and
// records, for every query, its attention to every earlier token (summed over
// heads and layers as every policy sees it) into a KvAttentionTrace; the
// second pass, under a budget, drops the tokens that the rest of the text's
// queries attend to least in that trace. It is the bound the other policies
// are measured against; it is greedy and uses the full cache's attention, so
// it is a very good choice, not a proven optimum (the bench checks it beats
// every policy at every budget).
//
// learned: drops the tokens a KvScorer rates lowest, from features of what
// the policy has seen (kv_scorer.h lists them); `kvlm kv train-policy` fits
// the scorer to the oracle's choices.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kv/kv_policy.h"

namespace kvlm {

// One sequence's attention with the full cache. Written by the first pass's
// policy in token order, then only read.
class KvAttentionTrace {
 public:
  int64_t num_rows() const { return static_cast<int64_t>(rows_.size()); }
  // Appends query num_rows()'s weights on tokens 0..num_rows() (row.size()
  // must be num_rows() + 1).
  void append_row(std::span<const float> row);
  // The mean attention token `token` receives from the queries after `now`
  // (at most `horizon` of them; 0: all recorded). 0 if there are none.
  float future_attention(int64_t token, int64_t now, int32_t horizon) const;

 private:
  std::vector<std::vector<float>> rows_;  // rows_[q]: [q + 1] weights
};

// For make_kv_policy(). Throw Error(kInvalidArgument) without a trace or a
// scorer.
std::unique_ptr<KvPolicy> make_oracle_policy(const KvBudget& budget, int32_t block_size);
std::unique_ptr<KvPolicy> make_learned_policy(const KvBudget& budget, int32_t block_size);

}  // namespace kvlm
