// KV eviction policies: which of a sequence's resident tokens to drop when it
// reaches its KV budget (docs/ARCHITECTURE.md "Budgets, policies, eviction").
//
// A policy sees one sequence's resident slots 0..n-1 in token order and keeps
// the statistics it needs for them, aligned with the slots: accumulated
// attention (h2o), the attention of the newest query (tova), the last time a
// slot was attended (lru), the model's predictive entropy at each position
// (entropy, entropy-low). When the KvCacheManager decides the sequence must
// shed tokens it asks choose() for exactly which slots go, drops them, and
// tells the policy with on_evict() so the statistics stay aligned.
//
// When a policy fires is not its business: the manager fires it when the
// sequence's resident tokens reach budget + block_size (its newest block has
// just filled), a point the sequence defines, never the scheduler's chunking.
// Each statistic is fed in token order (observe_* take rows in the order of
// their query positions), so the choices are the same however the sequence
// was split into steps or batched.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvlm {

enum class KvPolicyKind {
  kWindow,      // the most recent tokens
  kSinks,       // StreamingLLM: the first num_sinks tokens plus the most recent
  kH2o,         // heavy hitters (largest accumulated attention) plus a recent half
  kTova,        // drop the tokens the newest queries (since the last drop) attend to least
  kEntropy,     // drop the resident block with the highest mean predictive entropy
  kEntropyLow,  // ... the lowest
  kLru,         // drop the block attended (above uniform) least recently
  kFifo,        // drop the oldest block (sinks kept)
  // Offline only (bench kv, perplexity, kv train-policy): drop the tokens the
  // rest of the text attends to least, read from a first pass's trace.
  kOracle,
  kLearned,  // drop the tokens a trained scorer (kv_scorer.h) rates lowest
};
inline constexpr size_t kNumKvPolicyKinds = 10;

class KvAttentionTrace;
class KvScorer;
struct KvSampleSink;

// Every fixed policy, in the order tables list them (not oracle or learned:
// they need a first pass or a trained file).
std::span<const KvPolicyKind> all_kv_policies();
std::string_view kv_policy_name(KvPolicyKind kind);
// The fixed policies only: "oracle" and "learned:..." need more than a name.
std::optional<KvPolicyKind> parse_kv_policy(std::string_view name);
// "window, sinks, h2o, ..." for error messages and --help.
std::string kv_policy_names();

// Whether a policy consumes attention weights (the attention kernel then
// writes them out for this sequence) or per-position entropies (logits are
// computed at every position). Policies that need neither cost nothing.
bool kv_policy_needs_attention(KvPolicyKind kind);
bool kv_policy_needs_entropy(KvPolicyKind kind);
// Block policies drop whole blocks (no data moves); token policies pick single
// tokens and the survivors are compacted into dense blocks.
bool kv_policy_is_block_granular(KvPolicyKind kind);

// A sequence's KV budget. budget_tokens == 0: unbounded (no policy runs).
struct KvBudget {
  int32_t budget_tokens = 0;
  KvPolicyKind policy = KvPolicyKind::kSinks;
  int32_t num_sinks = 4;  // tokens kept at the start (sinks, entropy, lru, fifo)
  // Newest tokens always kept (h2o, tova, entropy, lru); 0: the policy's
  // default (h2o: half the budget; tova: the newest token; block policies:
  // the newest block).
  int32_t num_recent = 0;
  bool shift = false;     // renumber positions inside the cache (StreamingLLM)
  // kOracle: this sequence's attention with the full cache, recorded by a
  // first pass of the same text under the same policy (an empty trace records;
  // a full one is read). Shared: the caller keeps it across both passes.
  std::shared_ptr<KvAttentionTrace> oracle;
  int32_t oracle_horizon = 0;  // future queries the oracle sums (0: all)
  // kOracle during kv train-policy: every eviction point's (features, target)
  // rows go here. Shared: the trainer reads it after the request ends.
  std::shared_ptr<KvSampleSink> samples;
  // kLearned: the trained scorer. Shared: immutable, one per loaded file,
  // used by every request that names it.
  std::shared_ptr<const KvScorer> scorer;
  bool enabled() const { return budget_tokens > 0; }
};

// Throws Error(kInvalidArgument) unless the budget can work with this block
// size: a budget is a whole number of blocks (rounded up here) and at least
// two blocks, so sinks, a recent block and one candidate fit.
KvBudget validated_budget(KvBudget budget, int32_t block_size);

class KvPolicy {
 public:
  virtual ~KvPolicy() = default;
  KvPolicy(const KvPolicy&) = delete;
  KvPolicy& operator=(const KvPolicy&) = delete;

  KvPolicyKind kind() const { return kind_; }
  int32_t num_slots() const { return static_cast<int32_t>(score_.size()); }

  // Slots up to num_slots became resident (the tail grows; no-op if it has).
  // Statistics arrive for the slots of a step before the manager decides to
  // evict, so observe_* grow the statistics too.
  void grow_to(int32_t num_slots);
  // Attention of query rows to the resident slots, averaged over heads and
  // layers: weights[r * num_context + s] for query r (at slot
  // first_query_slot + r, token position first_query_token + r) and slot s <
  // num_context. Rows come in token order.
  virtual void observe_attention(int32_t first_query_slot, int64_t first_query_token, int32_t num_rows,
                                 int32_t num_context, std::span<const float> weights) {}
  // The model's predictive entropy (nats) at the token in `slot`.
  virtual void observe_entropy(int32_t slot, float entropy) {}
  // The token ids in slots first_slot, first_slot + 1, ... (in token order,
  // each once, as they are computed).
  virtual void observe_tokens(int32_t first_slot, std::span<const int32_t> tokens) {}

  // Exactly `num_evict` distinct slots of [0, num_slots()) to drop, ascending.
  // Block policies return whole blocks. Precondition: num_slots() is a whole
  // number of blocks larger than the budget, num_evict == block_size.
  virtual std::vector<int32_t> choose(int32_t num_evict) const = 0;
  // The slots choose() named were dropped; later slots moved down in order.
  void on_evict(std::span<const int32_t> slots);
  // The resident slots were rearranged: new slot i holds what old slot
  // from[i] held (the slots not named were dropped).
  void on_compact(std::span<const int32_t> from);

 protected:
  KvPolicy(KvPolicyKind kind, const KvBudget& budget, int32_t block_size)
      : kind_(kind), budget_(budget), block_size_(block_size) {}
  // The num_evict slots with the lowest score among all but the num_recent
  // newest tokens (by age, not slot: a compaction may reorder slots), ties to
  // the oldest; ascending.
  std::vector<int32_t> lowest(int32_t num_recent, int32_t num_evict) const;
  // Block policies: among the blocks between the sinks' and the newest
  // num_recent_blocks(), the one whose score over its slots (mean when
  // use_mean, else max) is lowest (highest when highest == true), ties to the
  // oldest. Returns its slots. Precondition: num_evict == block_size.
  std::vector<int32_t> pick_block(int32_t num_evict, bool use_mean, bool highest) const;
  // score_[s] += each row's weight on slot s, rows in order (h2o, tova).
  void add_attention(int32_t num_rows, int32_t num_context, std::span<const float> weights);
  // Blocks kept at the start for the sinks (ceil(num_sinks / block_size)).
  int32_t num_sink_blocks() const;
  // Newest blocks a block policy keeps (ceil(num_recent / block_size), at least 1).
  int32_t num_recent_blocks() const;
  // lowest() over another statistic (same length as score_).
  std::vector<int32_t> lowest_by(std::span<const float> score, int32_t num_recent, int32_t num_evict) const;
  // Called by on_compact() before after_evict(): policies with statistics of
  // their own rearrange them the same way.
  virtual void compact_stats(std::span<const int32_t> from) {}
  // Called after on_evict() (TOVA starts a new round of queries).
  virtual void after_evict() {}

  KvPolicyKind kind_;
  KvBudget budget_;
  int32_t block_size_;
  std::vector<float> score_;  // [num_slots] the policy's statistic per slot
  std::vector<int64_t> age_;  // [num_slots] the token's index in its sequence
  int64_t num_dropped_ = 0;   // tokens dropped so far: a new slot s holds token num_dropped_ + s
};

// Throws Error(kInvalidArgument) for a budget validated_budget() refuses.
std::unique_ptr<KvPolicy> make_kv_policy(const KvBudget& budget, int32_t block_size);

}  // namespace kvlm
