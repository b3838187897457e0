#include "runner/sequence_evaluator.h"

#include <algorithm>

#include "common/error.h"

namespace kvlm {

SequenceEvaluator::SequenceEvaluator(const Model& model, int32_t max_tokens, DType kv_dtype,
                                     int32_t block_size)
    : model_(model),
      storage_(model, kv_dtype, block_size,
               static_cast<int32_t>(model.kv_groups().size()) * ((max_tokens + block_size - 1) / block_size)),
      max_tokens_(max_tokens) {
  if (auto max_pos = model.max_positions(); max_pos && max_tokens > *max_pos)
    throw_error(ErrorCode::kOutOfRange, "{} tokens exceed the {} positions {} was trained with", max_tokens,
                *max_pos, model.config().arch_name);
  const size_t num_groups = model.kv_groups().size();
  const int32_t per_group = storage_.num_blocks() / static_cast<int32_t>(num_groups);
  block_tables_.resize(num_groups);
  for (size_t g = 0; g < num_groups; ++g)
    for (int32_t b = 0; b < per_group; ++b) block_tables_[g].push_back(static_cast<int32_t>(g) * per_group + b);
}

void SequenceEvaluator::rewind(int32_t num_tokens) {
  if (num_tokens < 0 || num_tokens > num_tokens_)
    throw_error(ErrorCode::kOutOfRange, "cannot rewind a sequence of {} tokens to {}", num_tokens_, num_tokens);
  num_tokens_ = num_tokens;
}

const std::vector<float>& SequenceEvaluator::eval(std::span<const int32_t> tokens, bool all_logits) {
  const int32_t T = static_cast<int32_t>(tokens.size());
  if (T == 0) throw_error(ErrorCode::kInvalidArgument, "nothing to evaluate");
  if (num_tokens_ + T > max_tokens_)
    throw_error(ErrorCode::kOutOfRange, "sequence of {} tokens exceeds the evaluator's {}",
                num_tokens_ + T, max_tokens_);
  const size_t num_groups = block_tables_.size();
  const int32_t bs = storage_.block_size();
  std::vector<int32_t> positions(T);
  std::vector<std::vector<int64_t>> slots(num_groups, std::vector<int64_t>(T));
  for (int32_t i = 0; i < T; ++i) {
    positions[i] = num_tokens_ + i;
    for (size_t g = 0; g < num_groups; ++g)
      slots[g][i] = static_cast<int64_t>(block_tables_[g][positions[i] / bs]) * bs + positions[i] % bs;
  }
  int64_t highest_slot = 0;
  for (const auto& group_slots : slots) highest_slot = std::max(highest_slot, group_slots.back());
  storage_.note_use(BlockId(static_cast<int32_t>(highest_slot / bs)));
  std::vector<int32_t> logit_rows;
  for (int32_t i = all_logits ? 0 : T - 1; i < T; ++i) logit_rows.push_back(i);

  std::vector<AttentionSeq> seqs;
  for (size_t g = 0; g < num_groups; ++g) seqs.push_back(AttentionSeq{0, T, num_tokens_ + T, block_tables_[g]});
  std::vector<KvGroupBatch> groups;
  for (size_t g = 0; g < num_groups; ++g) groups.push_back(KvGroupBatch{slots[g], {&seqs[g], 1}});
  ForwardBatch batch{tokens, positions, groups, logit_rows, logit_rows};
  std::vector<int32_t> rows;
  LoraRows lora;
  if (lora_) {
    rows.resize(static_cast<size_t>(T));
    for (int32_t i = 0; i < T; ++i) rows[static_cast<size_t>(i)] = i;
    lora = LoraRows{lora_.get(), rows};
    batch.lora = {&lora, 1};
  }
  logits_.resize(logit_rows.size() * static_cast<size_t>(model_.config().vocab_size));
  model_.forward(batch, storage_.view(), scratch_, logits_.data());
  num_tokens_ += T;
  return logits_;
}

}  // namespace kvlm
