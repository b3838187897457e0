#include "runner/sequence_evaluator.h"

#include "common/error.h"

namespace kvlm {

SequenceEvaluator::SequenceEvaluator(const Model& model, int32_t max_tokens, DType kv_dtype,
                                     int32_t block_size)
    : model_(model),
      storage_(model, kv_dtype, block_size, (max_tokens + block_size - 1) / block_size),
      max_tokens_(max_tokens) {
  for (int32_t b = 0; b < storage_.num_blocks(); ++b) block_table_.push_back(b);
}

const std::vector<float>& SequenceEvaluator::eval(std::span<const int32_t> tokens, bool all_logits) {
  const int32_t T = static_cast<int32_t>(tokens.size());
  if (T == 0) throw_error(ErrorCode::kInvalidArgument, "nothing to evaluate");
  if (num_tokens_ + T > max_tokens_)
    throw_error(ErrorCode::kOutOfRange, "sequence of {} tokens exceeds the evaluator's {}",
                num_tokens_ + T, max_tokens_);
  std::vector<int32_t> positions(T);
  std::vector<int64_t> slots(T);
  for (int32_t i = 0; i < T; ++i) positions[i] = slots[i] = num_tokens_ + i;
  std::vector<int32_t> logit_rows;
  for (int32_t i = all_logits ? 0 : T - 1; i < T; ++i) logit_rows.push_back(i);

  AttentionSeq seq{0, T, num_tokens_ + T, block_table_};
  // Every group sees the same slots: blocks are never freed here.
  std::vector<KvGroupBatch> groups(model_.kv_groups().size(), KvGroupBatch{slots, {&seq, 1}});
  ForwardBatch batch{tokens, positions, groups, logit_rows};
  logits_.resize(logit_rows.size() * static_cast<size_t>(model_.config().vocab_size));
  model_.forward(batch, storage_.view(), scratch_, logits_.data());
  num_tokens_ += T;
  return logits_;
}

}  // namespace kvlm
