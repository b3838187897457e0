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
// State: each sequence keeps its own KV in the draft (a SequenceEvaluator).
// On each call the proposer keeps the longest common prefix of what it has
// computed and the sequence's tokens now (the target rejected some of the
// last proposals: those are rolled back), evaluates only the tokens after it,
// then drafts up to K tokens one forward pass each. At most max_seqs
// sequences hold state; a sequence beyond that gets no proposals (rather than
// unbounded memory, or evicting one that is decoding, which would make the
// two re-prefill in turn) until another is released.
//
// One sequence at a time: each sequence's draft steps are forward passes of
// their own, not batched across sequences (docs/ARCHITECTURE.md says why).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/speculative.h"
#include "model/model.h"
#include "runner/sequence_evaluator.h"

namespace kvlm {

struct DraftProposerConfig {
  // Sequences that keep draft KV at once; beyond: no proposals.
  int32_t max_seqs = 16;
  // Tokens one sequence's draft KV holds (0: the draft's trained context).
  // Past it, the sequence gets no proposals. Clipped to the draft's context.
  int32_t max_tokens = 0;
  DType kv_dtype = DType::kF16;
};

class DraftProposer final : public Proposer {
 public:
  // Checks that `draft` reads the target's token ids as the target does:
  // the same logits width, the same vocabulary size, the same text for every
  // token, and the same BOS and EOS ids. A proposal is a token id, so ids
  // that name other texts would make every proposal wrong (never output
  // wrong: verification rejects them, but the draft would only cost time).
  // Comparing every token's text is sound and cheap (a few milliseconds for
  // 150k tokens, once). Merges and scores are not compared: the draft never
  // tokenizes, it only reads the target's ids. Throws Error(kInvalidArgument)
  // naming both files on a mismatch, and for a bad config.
  static std::unique_ptr<DraftProposer> create(std::unique_ptr<Model> draft, const Model& target,
                                               const std::string& draft_path, const std::string& target_path,
                                               DraftProposerConfig config);

  std::vector<int32_t> propose(RequestId id, std::span<const int32_t> tokens, int32_t num_prompt_tokens,
                               int32_t max_tokens) override;
  void release(RequestId id) override { seqs_.erase(id); }
  int32_t num_sequences() const override { return static_cast<int32_t>(seqs_.size()); }
  // Capacity of the live sequences' KV buffers (pages are touched as filled).
  int64_t kv_bytes() const override { return static_cast<int64_t>(seqs_.size()) * seq_kv_bytes_; }

  int32_t max_tokens_per_seq() const { return max_tokens_; }
  int64_t seq_kv_bytes() const { return seq_kv_bytes_; }

 private:
  DraftProposer(std::unique_ptr<Model> draft, DraftProposerConfig config, int32_t max_tokens);

  struct Seq {
    std::unique_ptr<SequenceEvaluator> eval;
    // The tokens whose KV `eval` holds, in order: eval->num_tokens() of them.
    std::vector<int32_t> computed;
  };
  // Brings seq's KV to `tokens` (all of them) and returns the last token's
  // logits: [vocab].
  std::span<const float> catch_up(Seq& seq, std::span<const int32_t> tokens);
  // Appends `token` to seq's KV and returns its logits: [vocab].
  std::span<const float> step(Seq& seq, int32_t token);

  std::unique_ptr<Model> draft_;
  DraftProposerConfig config_;
  int32_t max_tokens_;      // per sequence
  int64_t seq_kv_bytes_;    // one sequence's KV buffer
  int32_t vocab_size_;
  std::unordered_map<RequestId, Seq> seqs_;
};

}  // namespace kvlm
