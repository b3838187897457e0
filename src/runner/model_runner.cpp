#include "runner/model_runner.h"

#include "common/assert.h"

namespace kvlm {

ModelRunner::ModelRunner(const Model& model, DType kv_dtype, int32_t block_size, int32_t num_blocks)
    : model_(model), storage_(model, kv_dtype, block_size, num_blocks) {}

std::span<const float> ModelRunner::execute(const SchedulerOutput& out) {
  const size_t num_groups = model_.kv_groups().size();
  const int32_t bs = storage_.block_size();
  tokens_.clear();
  positions_.clear();
  logit_rows_.clear();
  slots_.assign(num_groups, {});
  seqs_.assign(num_groups, {});

  for (const ScheduledSeq& s : out.seqs) {
    KVLM_ASSERT(s.block_tables.size() == num_groups, "one block table per KV group");
    const int32_t begin = static_cast<int32_t>(tokens_.size());
    const int32_t n = static_cast<int32_t>(s.new_tokens.size());
    for (int32_t i = 0; i < n; ++i) {
      const int32_t slot = s.num_computed + i;  // logical slot == position
      tokens_.push_back(s.new_tokens[i]);
      positions_.push_back(slot);
      for (size_t g = 0; g < num_groups; ++g) {
        const auto& table = s.block_tables[g];
        KVLM_ASSERT(static_cast<size_t>(slot / bs) < table.size(), "block table covers the slot");
        slots_[g].push_back(static_cast<int64_t>(table[slot / bs]) * bs + slot % bs);
      }
    }
    for (size_t g = 0; g < num_groups; ++g)
      seqs_[g].push_back(AttentionSeq{begin, n, s.num_computed + n, s.block_tables[g]});
    for (int32_t i = 0; i < s.num_prompt_logits; ++i) logit_rows_.push_back(begin + i);
    if (s.sample) logit_rows_.push_back(begin + n - 1);
  }

  std::vector<KvGroupBatch> groups(num_groups);
  for (size_t g = 0; g < num_groups; ++g) groups[g] = KvGroupBatch{slots_[g], seqs_[g]};
  ForwardBatch batch{tokens_, positions_, groups, logit_rows_};
  const size_t vocab = static_cast<size_t>(model_.config().vocab_size);
  logits_.resize(logit_rows_.size() * vocab);
  if (!tokens_.empty()) model_.forward(batch, storage_.view(), scratch_, logits_.data());
  return logits_;
}

}  // namespace kvlm
