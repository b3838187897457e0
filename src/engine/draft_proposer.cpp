#include "engine/draft_proposer.h"

#include <algorithm>

#include "common/error.h"
#include "common/log.h"
#include "runner/kv_storage.h"
#include "tokenizer/vocab.h"

namespace kvlm {
namespace {

// The first difference between the two vocabularies, in words; empty when
// the draft reads every target id as the target does.
std::string vocab_difference(const Model& draft, const Model& target) {
  if (draft.config().vocab_size != target.config().vocab_size)
    return fmt::format("the draft's output has {} logits, the target's {}", draft.config().vocab_size,
                       target.config().vocab_size);
  const Vocab dv = Vocab::from_metadata(draft.gguf().metadata());
  const Vocab tv = Vocab::from_metadata(target.gguf().metadata());
  if (dv.size() != tv.size())
    return fmt::format("the draft's vocabulary has {} tokens, the target's {}", dv.size(), tv.size());
  for (int32_t id = 0; id < tv.size(); ++id)
    if (dv.text(id) != tv.text(id))
      return fmt::format("token {} is '{}' in the draft and '{}' in the target", id, dv.text(id), tv.text(id));
  auto name = [](std::optional<int32_t> id) { return id ? std::to_string(*id) : std::string("none"); };
  if (dv.special().bos != tv.special().bos)
    return fmt::format("the draft's BOS is {}, the target's {}", name(dv.special().bos), name(tv.special().bos));
  if (dv.special().eos != tv.special().eos)
    return fmt::format("the draft's EOS is {}, the target's {}", name(dv.special().eos), name(tv.special().eos));
  return {};
}

int32_t argmax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

}  // namespace

std::unique_ptr<DraftProposer> DraftProposer::create(std::unique_ptr<Model> draft, const Model& target,
                                                     const std::string& draft_path, const std::string& target_path,
                                                     DraftProposerConfig config) {
  if (config.max_seqs < 1)
    throw_error(ErrorCode::kInvalidArgument, "the draft model needs room for one sequence or more, got {}",
                config.max_seqs);
  if (config.max_tokens < 0)
    throw_error(ErrorCode::kInvalidArgument, "draft tokens per sequence must be >= 0 (0: the draft's context)");
  std::string difference;
  try {
    difference = vocab_difference(*draft, target);
  } catch (const Error& e) {
    difference = e.what();  // no readable vocabulary in one of them
  }
  if (!difference.empty())
    throw_error(ErrorCode::kInvalidArgument,
                "draft model {} cannot propose for {}: their vocabularies differ ({}); a draft must share the "
                "target's tokenizer",
                draft_path, target_path, difference);
  KvStorage::check_dtype(*draft, config.kv_dtype, 16);
  int32_t max_tokens = config.max_tokens > 0 ? config.max_tokens : draft->config().context_length;
  if (draft->config().context_length > 0) max_tokens = std::min(max_tokens, draft->config().context_length);
  if (auto max_pos = draft->max_positions()) max_tokens = std::min(max_tokens, *max_pos);
  if (max_tokens < 2)
    throw_error(ErrorCode::kInvalidArgument, "draft model {} has a context of {} tokens: too short to draft",
                draft_path, max_tokens);
  return std::unique_ptr<DraftProposer>(new DraftProposer(std::move(draft), config, max_tokens));
}

DraftProposer::DraftProposer(std::unique_ptr<Model> draft, DraftProposerConfig config, int32_t max_tokens)
    : draft_(std::move(draft)), config_(config), max_tokens_(max_tokens), vocab_size_(draft_->config().vocab_size) {
  // SequenceEvaluator's storage: every KV group gets ceil(max / 16) blocks.
  const int64_t blocks = static_cast<int64_t>(draft_->kv_groups().size()) * ((max_tokens_ + 15) / 16);
  seq_kv_bytes_ = blocks * static_cast<int64_t>(KvStorage::bytes_per_block(*draft_, config_.kv_dtype, 16));
  log_info("draft model: at most {} sequences of {} tokens, {:.1f} MiB of KV each ({:.1f} MiB at most, {})",
           config_.max_seqs, max_tokens_, static_cast<double>(seq_kv_bytes_) / 1048576.0,
           static_cast<double>(seq_kv_bytes_) * config_.max_seqs / 1048576.0, dtype_name(config_.kv_dtype));
}

std::vector<int32_t> DraftProposer::propose(RequestId id, std::span<const int32_t> tokens,
                                            int32_t /*num_prompt_tokens*/, int32_t max_tokens) {
  const auto num_tokens = static_cast<int32_t>(tokens.size());
  // The last proposal is read from the logits of the one before it, so K
  // proposals put num_tokens + K - 1 tokens in the draft's KV.
  max_tokens = std::min(max_tokens, max_tokens_ - num_tokens + 1);
  if (max_tokens <= 0 || num_tokens == 0) return {};
  auto it = seqs_.find(id);
  if (it == seqs_.end()) {
    if (static_cast<int32_t>(seqs_.size()) >= config_.max_seqs) return {};  // full: see the header
    Seq seq;
    seq.eval = std::make_unique<SequenceEvaluator>(*draft_, max_tokens_, config_.kv_dtype);
    it = seqs_.emplace(id, std::move(seq)).first;
  }
  Seq& seq = it->second;
  std::vector<int32_t> out;
  std::span<const float> logits = catch_up(seq, tokens);
  while (true) {
    out.push_back(argmax(logits));
    if (static_cast<int32_t>(out.size()) == max_tokens) break;
    logits = step(seq, out.back());
  }
  return out;
}

std::span<const float> DraftProposer::catch_up(Seq& seq, std::span<const int32_t> tokens) {
  // Keep the longest common prefix; the last token is evaluated again when
  // all of them are computed already, for its logits (the step before may
  // have scheduled no proposals after this call's twin).
  const auto common = static_cast<size_t>(
      std::mismatch(seq.computed.begin(), seq.computed.end(), tokens.begin(), tokens.end()).first -
      seq.computed.begin());
  const size_t keep = std::min(common, tokens.size() - 1);
  seq.eval->rewind(static_cast<int32_t>(keep));
  seq.computed.resize(keep);
  const std::span<const int32_t> fresh = tokens.subspan(keep);
  const std::vector<float>& logits = seq.eval->eval(fresh, /*all_logits=*/false);
  seq.computed.insert(seq.computed.end(), fresh.begin(), fresh.end());
  return {logits.data(), static_cast<size_t>(vocab_size_)};
}

std::span<const float> DraftProposer::step(Seq& seq, int32_t token) {
  const std::vector<float>& logits = seq.eval->eval(std::span<const int32_t>(&token, 1), /*all_logits=*/false);
  seq.computed.push_back(token);
  return {logits.data(), static_cast<size_t>(vocab_size_)};
}

}  // namespace kvlm
