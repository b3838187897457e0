// Speculative decoding with a draft model (`--draft-model FILE`,
// docs/ARCHITECTURE.md "Speculative decoding"): a second, smaller model with
// the target's vocabulary proposes the next tokens greedily.
//
// Exactness: a proposal is the draft's argmax after the context, so it is a
// deterministic function of the tokens, like an n-gram lookup's. The
// verification rule (Sampler::sample: accept proposal x with the target's
// probability p(x), else draw from the residual) is the rejection-sampling
// rule for a proposal distribution that puts all its mass on x, so sampled
// output keeps the target's distribution and greedy output is token for token
// what decoding without proposals gives. The draft's logits never reach the
// output; only its guesses do.
//
// State: each sequence keeps its own KV in the draft, in a slot of one KV
// storage (a run of blocks per slot and KV group, mapped lazily: a page
// costs memory once written, and stays with the slot for its next
// sequence). On each call the proposer keeps the longest common prefix of
// what it has computed for a sequence and the sequence's tokens now (the
// target rejected some of the last proposals: those are rolled back),
// evaluates only the tokens after it, then drafts up to K tokens. At most
// max_seqs sequences hold a slot; a sequence beyond that gets no proposals
// (rather than unbounded memory, or evicting one that is decoding, which
// would make the two re-prefill in turn) until another is released.
//
// Batched: propose_batch runs every sequence of the step in one forward pass
// per draft position (the catch-up, whatever its length, and the first
// proposal in the first pass; then one token per sequence still drafting),
// so the draft's weights are read K times a step, not K times a sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/spec/speculative.h"
#include "model/model.h"
#include "runner/kv_storage.h"

namespace kvlm {

struct DraftProposerConfig {
  // Sequences that keep draft KV at once; beyond: no proposals.
  int32_t max_seqs = 16;
  // Tokens one sequence's draft KV holds (0: the draft's trained context).
  // Past it, the sequence gets no more proposals and gives its slot back.
  // Clipped to the draft's context.
  int32_t max_tokens = 0;
  DType kv_dtype = DType::kF16;
};

class DraftProposer final : public Proposer {
 public:
  // Checks that `draft` reads the target's token ids as the target does:
  // the same text for every id both have, the same BOS and EOS ids, and
  // vocabulary sizes at most 128 apart (one tokenizer, its table padded to
  // other multiples, as within the Qwen2.5 family). A proposal is a token
  // id, so ids that name other texts would make every proposal wrong (never
  // output wrong: verification rejects them, but the draft would only cost
  // time). Comparing every token's text is sound and cheap (a few
  // milliseconds for 150k tokens, once). Merges and scores are not
  // compared: the draft never tokenizes, it only reads the target's ids.
  // Proposals are ids below both logits widths and both vocabularies; a
  // sequence holding an id past the draft's table gets no proposals. Throws
  // Error(kInvalidArgument) naming both files on a mismatch, and for a bad
  // config.
  static std::unique_ptr<DraftProposer> create(std::unique_ptr<Model> draft, const Model& target,
                                               const std::string& draft_path, const std::string& target_path,
                                               DraftProposerConfig config);

  std::vector<int32_t> propose(RequestId id, std::span<const int32_t> tokens, int32_t num_prompt_tokens,
                               int32_t max_tokens) override;
  std::vector<std::vector<int32_t>> propose_batch(std::span<const ProposalQuery> queries) override;
  void release(RequestId id) override;
  int32_t num_sequences() const override { return static_cast<int32_t>(seqs_.size()); }
  // KV capacity of the sequences holding a slot now.
  int64_t kv_bytes() const override { return static_cast<int64_t>(seqs_.size()) * seq_kv_bytes_; }

  int32_t max_tokens_per_seq() const { return max_tokens_; }
  int64_t seq_kv_bytes() const { return seq_kv_bytes_; }

 private:
  static constexpr int32_t kBlockSize = 16;
  DraftProposer(std::unique_ptr<Model> draft, DraftProposerConfig config, int32_t max_tokens,
                int32_t num_proposable);

  struct Seq {
    int32_t slot = 0;
    // The tokens whose KV the slot holds, in order.
    std::vector<int32_t> computed;
  };
  // One sequence's part of a forward pass: `tokens` go after seq->computed.
  struct Rows {
    Seq* seq;
    std::span<const int32_t> tokens;
  };
  // The sequence's state, made if there is a free slot; nullptr if not.
  Seq* find_or_add(RequestId id);
  // One forward pass of the draft over every part (each appended to its
  // sequence's KV and `computed`); the logits of each part's last token:
  // [rows.size(), vocab].
  const std::vector<float>& forward(std::span<const Rows> rows);

  std::unique_ptr<Model> draft_;
  DraftProposerConfig config_;
  int32_t max_tokens_;     // per sequence
  int32_t num_seq_blocks_; // blocks of one slot in one KV group
  int64_t seq_kv_bytes_;   // one slot's KV, all groups
  int32_t vocab_size_;      // the draft's logits (and embedding rows)
  int32_t num_proposable_;  // ids below it are in both vocabularies
  KvStorage storage_;      // [group][slot][num_seq_blocks_] blocks
  std::vector<std::vector<std::vector<int32_t>>> tables_;  // [slot][group]: its block ids in order
  std::vector<int32_t> free_slots_;
  std::unordered_map<RequestId, Seq> seqs_;
  ForwardScratch scratch_;
  // The forward pass's buffers, kept between calls.
  std::vector<int32_t> tokens_, positions_, logit_rows_;
  std::vector<std::vector<int64_t>> slots_;       // [group][T]
  std::vector<std::vector<AttentionSeq>> seqs_att_;  // [group][rows]
  std::vector<float> logits_;
};

}  // namespace kvlm
