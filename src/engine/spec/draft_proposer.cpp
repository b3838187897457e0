#include "engine/spec/draft_proposer.h"

#include <algorithm>
#include <cstdlib>

#include "common/error.h"
#include "common/log.h"
#include "runner/kv_storage.h"
#include "runner/sampler.h"  // argmax: the first greatest, as the target samples greedily
#include "tokenizer/vocab.h"

namespace kvlm {
namespace {

// Models of one family may pad their embedding tables (and the token
// lists with them) to different multiples: Qwen2.5-0.5B has 151,936 ids,
// Qwen2.5-7B 152,064. Vocabularies this close are one tokenizer padded.
constexpr int32_t kMaxPaddingDifference = 128;

// The first difference between the two vocabularies, in words; empty when
// the draft reads every id both have as the target does.
std::string vocab_difference(const Vocab& dv, const Vocab& tv) {
  if (std::abs(dv.size() - tv.size()) > kMaxPaddingDifference)
    return fmt::format("the draft's vocabulary has {} tokens, the target's {}", dv.size(), tv.size());
  const int32_t num_shared = std::min(dv.size(), tv.size());
  for (int32_t id = 0; id < num_shared; ++id)
    if (dv.text(id) != tv.text(id))
      return fmt::format("token {} is '{}' in the draft and '{}' in the target", id, dv.text(id), tv.text(id));
  auto name = [](std::optional<int32_t> id) { return id ? std::to_string(*id) : std::string("none"); };
  if (dv.special().bos != tv.special().bos)
    return fmt::format("the draft's BOS is {}, the target's {}", name(dv.special().bos), name(tv.special().bos));
  if (dv.special().eos != tv.special().eos)
    return fmt::format("the draft's EOS is {}, the target's {}", name(dv.special().eos), name(tv.special().eos));
  return {};
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
  int32_t num_proposable = 0;  // ids below it are words of both vocabularies
  try {
    const Vocab dv = Vocab::from_metadata(draft->gguf().metadata());
    const Vocab tv = Vocab::from_metadata(target.gguf().metadata());
    difference = vocab_difference(dv, tv);
    num_proposable = std::min({draft->config().vocab_size, target.config().vocab_size, dv.size(), tv.size()});
  } catch (const Error& e) {
    difference = e.what();  // no readable vocabulary in one of them
  }
  if (!difference.empty())
    throw_error(ErrorCode::kInvalidArgument,
                "draft model {} cannot propose for {}: their vocabularies differ ({}); a draft must share the "
                "target's tokenizer",
                draft_path, target_path, difference);
  KvStorage::check_dtype(*draft, config.kv_dtype, kBlockSize);
  int32_t max_tokens = config.max_tokens > 0 ? config.max_tokens : draft->config().context_length;
  if (draft->config().context_length > 0) max_tokens = std::min(max_tokens, draft->config().context_length);
  if (auto max_pos = draft->max_positions()) max_tokens = std::min(max_tokens, *max_pos);
  if (max_tokens < 2)
    throw_error(ErrorCode::kInvalidArgument, "draft model {} has a context of {} tokens: too short to draft",
                draft_path, max_tokens);
  const int64_t num_blocks = static_cast<int64_t>(draft->kv_groups().size()) * config.max_seqs *
                             ((max_tokens + kBlockSize - 1) / kBlockSize);
  if (num_blocks > (1 << 30))
    throw_error(ErrorCode::kInvalidArgument,
                "draft model {}: {} sequences of {} tokens are too many KV blocks; lower --draft-max-seqs or "
                "--max-model-len",
                draft_path, config.max_seqs, max_tokens);
  return std::unique_ptr<DraftProposer>(new DraftProposer(std::move(draft), config, max_tokens, num_proposable));
}

DraftProposer::DraftProposer(std::unique_ptr<Model> draft, DraftProposerConfig config, int32_t max_tokens,
                             int32_t num_proposable)
    : draft_(std::move(draft)),
      config_(config),
      max_tokens_(max_tokens),
      num_seq_blocks_((max_tokens + kBlockSize - 1) / kBlockSize),
      seq_kv_bytes_(static_cast<int64_t>(draft_->kv_groups().size()) * num_seq_blocks_ *
                    static_cast<int64_t>(KvStorage::bytes_per_block(*draft_, config.kv_dtype, kBlockSize))),
      vocab_size_(draft_->config().vocab_size),
      num_proposable_(num_proposable),
      storage_(*draft_, config.kv_dtype, kBlockSize,
               static_cast<int32_t>(draft_->kv_groups().size()) * config.max_seqs * num_seq_blocks_) {
  // Group g's blocks for every slot come before group g + 1's: groups share
  // storage rows, never block ids (SequenceEvaluator lays them out so too).
  const auto num_groups = static_cast<int32_t>(draft_->kv_groups().size());
  tables_.resize(static_cast<size_t>(config_.max_seqs));
  for (int32_t slot = 0; slot < config_.max_seqs; ++slot) {
    tables_[slot].resize(static_cast<size_t>(num_groups));
    for (int32_t g = 0; g < num_groups; ++g)
      for (int32_t b = 0; b < num_seq_blocks_; ++b)
        tables_[slot][g].push_back((g * config_.max_seqs + slot) * num_seq_blocks_ + b);
  }
  for (int32_t slot = config_.max_seqs - 1; slot >= 0; --slot) free_slots_.push_back(slot);
  slots_.resize(static_cast<size_t>(num_groups));
  seqs_att_.resize(static_cast<size_t>(num_groups));
  log_info("draft model: at most {} sequences of {} tokens, {:.1f} MiB of KV each ({:.1f} MiB at most, {})",
           config_.max_seqs, max_tokens_, static_cast<double>(seq_kv_bytes_) / 1048576.0,
           static_cast<double>(seq_kv_bytes_) * config_.max_seqs / 1048576.0, dtype_name(config_.kv_dtype));
}

void DraftProposer::release(RequestId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  free_slots_.push_back(it->second.slot);
  seqs_.erase(it);
}

DraftProposer::Seq* DraftProposer::find_or_add(RequestId id) {
  if (auto it = seqs_.find(id); it != seqs_.end()) return &it->second;
  if (free_slots_.empty()) return nullptr;  // full: see the header
  Seq& seq = seqs_[id];
  seq.slot = free_slots_.back();
  free_slots_.pop_back();
  return &seq;
}

std::vector<int32_t> DraftProposer::propose(RequestId id, std::span<const int32_t> tokens,
                                            int32_t num_prompt_tokens, int32_t max_tokens) {
  const ProposalQuery query{id, tokens, num_prompt_tokens, max_tokens};
  return std::move(propose_batch({&query, 1})[0]);
}

std::vector<std::vector<int32_t>> DraftProposer::propose_batch(std::span<const ProposalQuery> queries) {
  std::vector<std::vector<int32_t>> out(queries.size());
  struct Drafting {
    size_t query;
    Seq* seq;
    int32_t num_tokens;  // proposals wanted
  };
  std::vector<Drafting> drafting;
  std::vector<Rows> rows;
  for (size_t i = 0; i < queries.size(); ++i) {
    const ProposalQuery& q = queries[i];
    const auto n = static_cast<int32_t>(q.tokens.size());
    // The last proposal is read from the logits of the one before it, so K
    // proposals put n + K - 1 tokens in the draft's KV.
    const int32_t k = std::min(q.max_tokens, max_tokens_ - n + 1);
    if (n == 0 || k <= 0) {
      // Past the slot's room the sequence never drafts again: free the slot.
      if (max_tokens_ - n + 1 <= 0) release(q.id);
      continue;
    }
    // A target with the larger table may emit an id past the draft's; the
    // draft cannot read it, so that sequence gets no more proposals.
    if (std::any_of(q.tokens.begin(), q.tokens.end(), [&](int32_t t) { return t < 0 || t >= vocab_size_; })) {
      release(q.id);
      continue;
    }
    Seq* seq = find_or_add(q.id);
    if (!seq) continue;
    // Keep the longest common prefix; the last token is evaluated again when
    // all of them are computed already, for its logits (the step before may
    // have scheduled none of this call's twin's proposals).
    const auto common = static_cast<size_t>(
        std::mismatch(seq->computed.begin(), seq->computed.end(), q.tokens.begin(), q.tokens.end()).first -
        seq->computed.begin());
    const size_t keep = std::min(common, q.tokens.size() - 1);
    seq->computed.resize(keep);
    drafting.push_back(Drafting{i, seq, k});
    rows.push_back(Rows{seq, q.tokens.subspan(keep)});
  }
  // Pass j gives each drafting sequence its proposal j; a sequence leaves
  // once it has its K.
  std::vector<int32_t> last(drafting.size());
  while (!rows.empty()) {
    const std::vector<float>& logits = forward(rows);
    for (size_t r = 0; r < drafting.size(); ++r) {
      const float* row = logits.data() + r * static_cast<size_t>(vocab_size_);
      last[r] = argmax({row, static_cast<size_t>(num_proposable_)});
      out[drafting[r].query].push_back(last[r]);
    }
    std::vector<Drafting> still;
    std::vector<int32_t> still_last;
    for (size_t r = 0; r < drafting.size(); ++r) {
      if (static_cast<int32_t>(out[drafting[r].query].size()) == drafting[r].num_tokens) continue;
      still.push_back(drafting[r]);
      still_last.push_back(last[r]);
    }
    drafting = std::move(still);
    last = std::move(still_last);
    rows.clear();
    for (size_t r = 0; r < drafting.size(); ++r) rows.push_back(Rows{drafting[r].seq, {&last[r], 1}});
  }
  return out;
}

const std::vector<float>& DraftProposer::forward(std::span<const Rows> rows) {
  const size_t num_groups = tables_.empty() ? 0 : tables_[0].size();
  tokens_.clear();
  positions_.clear();
  logit_rows_.clear();
  for (size_t g = 0; g < num_groups; ++g) slots_[g].clear(), seqs_att_[g].clear();
  int64_t highest_slot = 0;
  for (const Rows& r : rows) {
    const auto begin = static_cast<int32_t>(tokens_.size());
    const auto n = static_cast<int32_t>(r.tokens.size());
    const auto start = static_cast<int32_t>(r.seq->computed.size());
    for (int32_t i = 0; i < n; ++i) {
      const int32_t pos = start + i;
      tokens_.push_back(r.tokens[static_cast<size_t>(i)]);
      positions_.push_back(pos);
      for (size_t g = 0; g < num_groups; ++g) {
        const int64_t slot = static_cast<int64_t>(tables_[r.seq->slot][g][pos / kBlockSize]) * kBlockSize +
                             pos % kBlockSize;
        slots_[g].push_back(slot);
        highest_slot = std::max(highest_slot, slot);
      }
    }
    for (size_t g = 0; g < num_groups; ++g)
      seqs_att_[g].push_back(AttentionSeq{begin, n, start + n, tables_[r.seq->slot][g]});
    logit_rows_.push_back(begin + n - 1);
    r.seq->computed.insert(r.seq->computed.end(), r.tokens.begin(), r.tokens.end());
  }
  storage_.note_use(BlockId(static_cast<int32_t>(highest_slot / kBlockSize)));
  std::vector<KvGroupBatch> groups;
  for (size_t g = 0; g < num_groups; ++g) groups.push_back(KvGroupBatch{slots_[g], seqs_att_[g]});
  const ForwardBatch batch{tokens_, positions_, groups, logit_rows_, {}};
  logits_.resize(logit_rows_.size() * static_cast<size_t>(vocab_size_));
  draft_->forward(batch, storage_.view(), scratch_, logits_.data());
  return logits_;
}

}  // namespace kvlm
