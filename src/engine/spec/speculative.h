// Speculative decoding (docs/ARCHITECTURE.md "Speculative decoding"): a
// proposer guesses the tokens that follow a decoding sequence; the engine
// computes them beside the sequence's last token in its ordinary batched
// step, samples a row for each, keeps the proposals the sampler agrees with
// plus the one token it drew after them, and rolls the rest's KV back.
//
// Proposers are plain token logic on the engine thread. A proposal is only a
// guess: whatever it says, the output is what decoding without it gives
// (greedy: token for token; sampling: in distribution, Sampler::sample).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/strong_id.h"

namespace kvlm {

// One sequence's question to a proposer (Proposer::propose's arguments).
struct ProposalQuery {
  RequestId id;
  std::span<const int32_t> tokens;
  int32_t num_prompt_tokens = 0;
  int32_t max_tokens = 0;
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  // Up to max_tokens tokens that may follow `tokens` (request `id`'s prompt,
  // then its output; the first num_prompt_tokens are the prompt). Empty:
  // none. Called on the engine thread only, at most once per decode step of
  // a sequence. `id` lets a proposer keep state per sequence (a draft
  // model's KV); between calls the tokens may have lost a tail (rejected
  // proposals) and gained new ones.
  virtual std::vector<int32_t> propose(RequestId id, std::span<const int32_t> tokens, int32_t num_prompt_tokens,
                                       int32_t max_tokens) = 0;
  // The proposals for several sequences of one step ([queries.size()], each
  // as propose would give it; distinct ids). A proposer whose work batches
  // (a draft model: one forward pass per draft position for all sequences)
  // overrides it; by default, propose for each in turn.
  virtual std::vector<std::vector<int32_t>> propose_batch(std::span<const ProposalQuery> queries);
  // Request `id` will not be asked about again soon (it finished, was
  // aborted or preempted): drop what is kept for it. No-op for an id it
  // keeps nothing for. Engine thread only.
  virtual void release(RequestId /*id*/) {}
  // What the proposer holds for sequences now (engine metrics): sequences
  // with state, and the bytes of their KV. Engine thread only.
  virtual int32_t num_sequences() const { return 0; }
  virtual int64_t kv_bytes() const { return 0; }
};

// Prompt lookup (n-gram): finds the latest earlier occurrence of the last n
// tokens (n from max_ngram down to min_ngram) in the prompt and output so
// far, and proposes what followed it there. Stateless.
class NgramProposer final : public Proposer {
 public:
  NgramProposer(int32_t min_ngram, int32_t max_ngram);
  std::vector<int32_t> propose(RequestId id, std::span<const int32_t> tokens, int32_t num_prompt_tokens,
                               int32_t max_tokens) override;

 private:
  int32_t min_ngram_, max_ngram_;
};

// Replays known continuations (kvlm bench speculative): for a prompt it was
// given, the continuation's next tokens, each one corrupted (replaced by
// another id) with probability 1 - acceptance, decided by a hash of the
// prompt and the position, so a run is reproducible. A prompt it does not
// know gets no proposal.
class ReplayProposer final : public Proposer {
 public:
  ReplayProposer(double acceptance, int32_t vocab_size);
  void add(std::vector<int32_t> prompt, std::vector<int32_t> continuation);
  std::vector<int32_t> propose(RequestId id, std::span<const int32_t> tokens, int32_t num_prompt_tokens,
                               int32_t max_tokens) override;

 private:
  double acceptance_;
  int32_t vocab_size_;
  std::unordered_map<uint64_t, std::vector<int32_t>> continuations_;  // by prompt hash
};

// kDraft: the proposer is a DraftProposer (engine/spec/draft_proposer.h) the
// caller builds from a second model and passes as SpeculativeConfig::proposer.
enum class SpeculateMode { kOff, kNgram, kDraft };
std::string_view speculate_mode_name(SpeculateMode m);  // "off", "ngram", "draft"

struct SpeculativeConfig {
  SpeculateMode mode = SpeculateMode::kOff;
  // Proposals per step and sequence (K). 0: adaptive (up to
  // kMaxAdaptiveSpecTokens, chosen per sequence by SpecController).
  int32_t num_spec_tokens = 0;
  int32_t min_ngram = 1, max_ngram = 3;  // NgramProposer
  // A proposer of the caller's own (bench's replay): used whatever `mode`
  // says. shared_ptr: EngineConfig is copied, and the caller may keep it.
  std::shared_ptr<Proposer> proposer;
  // Adaptive only: a step whose batch already holds this many tokens
  // before proposals is compute-bound, and proposals are no longer nearly
  // free: none then. verify_cost: SpecController's cost model.
  int32_t max_batch_tokens = 16;
  double verify_cost = 0.1;
  bool enabled() const { return mode != SpeculateMode::kOff || proposer != nullptr; }
};

inline constexpr int32_t kMaxAdaptiveSpecTokens = 8;

// One sequence's adaptive K. It estimates the chance a proposal is right
// (a: accepted proposals over proposals tested, a decaying count; a run that
// stops at a rejection tested one more than it accepted) and picks the K
// that gives the most tokens per unit of step cost: a step of K proposals
// yields (1 - a^(K+1)) / (1 - a) tokens on average and costs about
// 1 + (verify_cost + propose_cost) * K decode steps (verify_cost: what one more token in a
// small batch adds, on a CPU about 0.05-0.15 of a decode step, where the
// weights' reading dominates). K = 0 when no K beats plain decoding; it then
// tries one proposal every 16 steps, as the text may turn repetitive.
class SpecController {
 public:
  SpecController(int32_t max_tokens, double verify_cost) : max_(max_tokens), verify_cost_(verify_cost) {}
  // K for the next step (0: none this step). propose_cost: what making one
  // proposal costs, in decode steps (a draft model's forward pass against
  // the target's; about 0 for a lookup), counted beside verify_cost.
  int32_t num_tokens(double propose_cost = 0);
  void observe(int32_t num_proposed, int32_t num_accepted);
  double acceptance() const { return num_accepted_ / num_tested_; }

 private:
  int32_t max_;
  double verify_cost_;
  // Decayed by 0.8 a step; the start is a prior of a = 0.8 worth 2.5
  // proposals, so one early miss does not stop a sequence for good.
  double num_accepted_ = 2.0, num_tested_ = 2.5;
  int32_t num_idle_steps_ = 0;
};

}  // namespace kvlm
