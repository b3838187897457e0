#include "kv/kv_policy.h"

#include <algorithm>
#include <array>
#include <limits>
#include <numeric>

#include "common/assert.h"
#include "common/error.h"
#include "kv/kv_learned_policy.h"

namespace kvlm {
namespace {

constexpr std::array<KvPolicyKind, 8> kAllPolicies = {
    KvPolicyKind::kWindow,  KvPolicyKind::kSinks,      KvPolicyKind::kH2o, KvPolicyKind::kTova,
    KvPolicyKind::kEntropy, KvPolicyKind::kEntropyLow, KvPolicyKind::kLru, KvPolicyKind::kFifo,
};

// The most recent tokens (window) or the first num_sinks plus the most recent
// (sinks): the oldest evictable tokens go.
class RecencyPolicy final : public KvPolicy {
 public:
  RecencyPolicy(KvPolicyKind kind, const KvBudget& b, int32_t bs) : KvPolicy(kind, b, bs) {}
  std::vector<int32_t> choose(int32_t num_evict) const override {
    const int32_t first = kind_ == KvPolicyKind::kSinks ? budget_.num_sinks : 0;
    std::vector<int32_t> out(static_cast<size_t>(num_evict));
    std::iota(out.begin(), out.end(), first);
    return out;
  }
};

// H2O (Zhang et al. 2023): every query's attention accumulates on the slots it
// sees; the most recent half of the budget is always kept, and among older
// slots those with the least accumulated attention go.
class HeavyHitterPolicy final : public KvPolicy {
 public:
  HeavyHitterPolicy(const KvBudget& b, int32_t bs) : KvPolicy(KvPolicyKind::kH2o, b, bs) {}
  void observe_attention(int32_t, int64_t, int32_t num_rows, int32_t num_context,
                         std::span<const float> weights) override {
    add_attention(num_rows, num_context, weights);
  }
  std::vector<int32_t> choose(int32_t num_evict) const override {
    // The paper's split: half the budget for the recent window by default.
    const int32_t num_recent = budget_.num_recent > 0 ? budget_.num_recent : budget_.budget_tokens / 2;
    return lowest(num_recent, num_evict);
  }
};

// TOVA (Oren et al. 2024): the newest queries' attention decides; the tokens
// they attend to least go. TOVA drops one token per query; kvlm drops a block's
// worth at a time, so the score is the attention of every query since the
// last eviction (the newest block's), summed: with one query it is TOVA, and
// on stories260K the sum beats the last query alone at every budget (notes in
// docs/kv-budgets.md). The newest num_recent tokens (default: the newest one)
// always stay.
class TovaPolicy final : public KvPolicy {
 public:
  TovaPolicy(const KvBudget& b, int32_t bs) : KvPolicy(KvPolicyKind::kTova, b, bs) {}
  void observe_attention(int32_t, int64_t, int32_t num_rows, int32_t num_context,
                         std::span<const float> weights) override {
    add_attention(num_rows, num_context, weights);
  }
  std::vector<int32_t> choose(int32_t num_evict) const override {
    return lowest(std::max(1, budget_.num_recent), num_evict);
  }
  void after_evict() override { std::fill(score_.begin(), score_.end(), 0.f); }
};

// Entropy-guided pages: each slot records the model's predictive entropy at
// that position; the resident block with the highest (entropy) or lowest
// (entropy-low) mean goes, sink blocks and the newest block kept.
class EntropyPolicy final : public KvPolicy {
 public:
  EntropyPolicy(KvPolicyKind kind, const KvBudget& b, int32_t bs) : KvPolicy(kind, b, bs) {}
  void observe_entropy(int32_t slot, float entropy) override {
    if (slot >= 0 && slot < num_slots()) score_[slot] = entropy;
  }
  std::vector<int32_t> choose(int32_t num_evict) const override {
    return pick_block(num_evict, /*use_mean=*/true, /*highest=*/kind_ == KvPolicyKind::kEntropy);
  }
};

// LRU: a slot is "used" when a query gives it more than a uniform share of its
// attention; the block whose newest use is oldest goes (sinks and the newest
// block kept). A slot counts as used when it is written.
class LruPolicy final : public KvPolicy {
 public:
  LruPolicy(const KvBudget& b, int32_t bs) : KvPolicy(KvPolicyKind::kLru, b, bs) {}
  void observe_attention(int32_t first_query_slot, int64_t first_query_token, int32_t num_rows,
                         int32_t num_context, std::span<const float> weights) override {
    for (int32_t r = 0; r < num_rows; ++r) {
      const int32_t query_slot = first_query_slot + r;
      const auto now = static_cast<float>(first_query_token + r);
      const int32_t num_visible = std::min(query_slot + 1, num_context);
      const float uniform = 1.f / static_cast<float>(num_visible);
      for (int32_t s = 0; s < num_visible && s < num_slots(); ++s)
        if (weights[static_cast<size_t>(r) * num_context + s] > uniform || s == query_slot) score_[s] = now;
    }
  }
  std::vector<int32_t> choose(int32_t num_evict) const override {
    return pick_block(num_evict, /*use_mean=*/false, /*highest=*/false);
  }
};

// FIFO: the oldest block after the sinks' blocks.
class FifoPolicy final : public KvPolicy {
 public:
  FifoPolicy(const KvBudget& b, int32_t bs) : KvPolicy(KvPolicyKind::kFifo, b, bs) {}
  std::vector<int32_t> choose(int32_t num_evict) const override {
    KVLM_ASSERT(num_evict == block_size_, "block policies evict one block");
    std::vector<int32_t> out(static_cast<size_t>(num_evict));
    std::iota(out.begin(), out.end(), num_sink_blocks() * block_size_);
    return out;
  }
};

}  // namespace

std::span<const KvPolicyKind> all_kv_policies() { return kAllPolicies; }

std::string_view kv_policy_name(KvPolicyKind kind) {
  switch (kind) {
    case KvPolicyKind::kOracle: return "oracle";
    case KvPolicyKind::kLearned: return "learned";
    case KvPolicyKind::kWindow: return "window";
    case KvPolicyKind::kSinks: return "sinks";
    case KvPolicyKind::kH2o: return "h2o";
    case KvPolicyKind::kTova: return "tova";
    case KvPolicyKind::kEntropy: return "entropy";
    case KvPolicyKind::kEntropyLow: return "entropy-low";
    case KvPolicyKind::kLru: return "lru";
    case KvPolicyKind::kFifo: return "fifo";
  }
  return "?";
}

std::optional<KvPolicyKind> parse_kv_policy(std::string_view name) {
  for (KvPolicyKind k : kAllPolicies)
    if (kv_policy_name(k) == name) return k;
  return std::nullopt;
}

std::string kv_policy_names() {
  std::string out;
  for (KvPolicyKind k : kAllPolicies) {
    if (!out.empty()) out += ", ";
    out += kv_policy_name(k);
  }
  return out;
}

bool kv_policy_needs_attention(KvPolicyKind kind) {
  return kind == KvPolicyKind::kH2o || kind == KvPolicyKind::kTova || kind == KvPolicyKind::kLru ||
         kind == KvPolicyKind::kOracle || kind == KvPolicyKind::kLearned;
}

// The oracle collects entropy too: kv train-policy records the learned
// policy's features under it.
bool kv_policy_needs_entropy(KvPolicyKind kind) {
  return kind == KvPolicyKind::kEntropy || kind == KvPolicyKind::kEntropyLow || kind == KvPolicyKind::kOracle ||
         kind == KvPolicyKind::kLearned;
}

bool kv_policy_is_block_granular(KvPolicyKind kind) {
  return kind == KvPolicyKind::kEntropy || kind == KvPolicyKind::kEntropyLow || kind == KvPolicyKind::kLru ||
         kind == KvPolicyKind::kFifo;
}

KvBudget validated_budget(KvBudget b, int32_t block_size) {
  if (!b.enabled()) return b;
  if (b.budget_tokens < 0) throw_error(ErrorCode::kInvalidArgument, "kv_budget must be positive, got {}", b.budget_tokens);
  if (b.num_sinks < 0) throw_error(ErrorCode::kInvalidArgument, "kv sinks must be >= 0, got {}", b.num_sinks);
  if (b.num_recent < 0) throw_error(ErrorCode::kInvalidArgument, "kv recent must be >= 0, got {}", b.num_recent);
  if (b.policy == KvPolicyKind::kOracle && !b.oracle)
    throw_error(ErrorCode::kInvalidArgument, "kv policy oracle is offline only (kvlm bench kv, kvlm perplexity)");
  if (b.policy == KvPolicyKind::kLearned && !b.scorer)
    throw_error(ErrorCode::kInvalidArgument, "kv policy learned needs a trained file: learned:POLICY.json");
  // Memory comes in blocks: a budget is a whole number of them.
  b.budget_tokens = (b.budget_tokens + block_size - 1) / block_size * block_size;
  const int32_t num_sink_blocks = (b.num_sinks + block_size - 1) / block_size;
  const int32_t min_blocks = std::max(2, num_sink_blocks + 1);
  if (b.budget_tokens < min_blocks * block_size)
    throw_error(ErrorCode::kInvalidArgument,
                "kv_budget {} is too small: with {} sink tokens and blocks of {} tokens it must be at least {}",
                b.budget_tokens, b.num_sinks, block_size, min_blocks * block_size);
  // The recent window and the sinks must leave a block's worth of candidates.
  const int32_t num_recent_blocks = std::max(1, (b.num_recent + block_size - 1) / block_size);
  if (b.num_recent > b.budget_tokens || num_sink_blocks + num_recent_blocks > b.budget_tokens / block_size)
    throw_error(ErrorCode::kInvalidArgument,
                "kv recent window {} with {} sink tokens leaves nothing to evict under kv_budget {}", b.num_recent,
                b.num_sinks, b.budget_tokens);
  return b;
}

void KvPolicy::grow_to(int32_t num_slots) {
  for (auto s = static_cast<int32_t>(score_.size()); s < num_slots; ++s) {
    score_.push_back(0.f);
    age_.push_back(num_dropped_ + s);
  }
}

void KvPolicy::add_attention(int32_t num_rows, int32_t num_context, std::span<const float> weights) {
  for (int32_t r = 0; r < num_rows; ++r)
    for (int32_t s = 0; s < num_context && s < num_slots(); ++s) score_[s] += weights[static_cast<size_t>(r) * num_context + s];
}

void KvPolicy::on_evict(std::span<const int32_t> slots) {
  std::vector<int32_t> from;
  size_t next = 0;
  for (int32_t s = 0; s < num_slots(); ++s) {
    if (next < slots.size() && slots[next] == s) {
      ++next;
      continue;
    }
    from.push_back(s);
  }
  KVLM_ASSERT(next == slots.size(), "evicted slots must be ascending and resident");
  on_compact(from);
}

void KvPolicy::on_compact(std::span<const int32_t> from) {
  std::vector<float> score(from.size());
  std::vector<int64_t> age(from.size());
  for (size_t i = 0; i < from.size(); ++i) {
    KVLM_ASSERT(from[i] >= 0 && from[i] < num_slots(), "a compaction names a slot that is not resident");
    score[i] = score_[static_cast<size_t>(from[i])];
    age[i] = age_[static_cast<size_t>(from[i])];
  }
  num_dropped_ += static_cast<int64_t>(score_.size() - from.size());
  score_ = std::move(score);
  age_ = std::move(age);
  compact_stats(from);
  after_evict();
}

std::vector<int32_t> KvPolicy::lowest(int32_t num_recent, int32_t num_evict) const {
  return lowest_by(score_, num_recent, num_evict);
}

std::vector<int32_t> KvPolicy::lowest_by(std::span<const float> score, int32_t num_recent, int32_t num_evict) const {
  const int32_t n = num_slots();
  KVLM_ASSERT(n - num_recent >= num_evict, "too few candidates to evict");
  std::vector<int32_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  // The newest num_recent tokens stay: candidates are the n - num_recent oldest.
  std::nth_element(idx.begin(), idx.begin() + (n - num_recent), idx.end(),
                   [&](int32_t a, int32_t b) { return age_[a] < age_[b]; });
  idx.resize(static_cast<size_t>(n - num_recent));
  auto by_score = [&](int32_t a, int32_t b) { return score[a] != score[b] ? score[a] < score[b] : age_[a] < age_[b]; };
  std::partial_sort(idx.begin(), idx.begin() + num_evict, idx.end(), by_score);
  idx.resize(static_cast<size_t>(num_evict));
  std::sort(idx.begin(), idx.end());
  return idx;
}

std::vector<int32_t> KvPolicy::pick_block(int32_t num_evict, bool use_mean, bool highest) const {
  KVLM_ASSERT(num_evict == block_size_, "block policies evict one block");
  const int32_t first_block = num_sink_blocks();
  const int32_t last_block = num_slots() / block_size_ - num_recent_blocks();
  KVLM_ASSERT(first_block < last_block, "no candidate block to evict");
  int32_t best = first_block;
  double best_score = 0;
  for (int32_t b = first_block; b < last_block; ++b) {
    double agg = use_mean ? 0.0 : -std::numeric_limits<double>::infinity();
    for (int32_t s = b * block_size_; s < (b + 1) * block_size_; ++s)
      agg = use_mean ? agg + score_[s] : std::max(agg, static_cast<double>(score_[s]));
    if (use_mean) agg /= block_size_;
    // Strict comparison: ties go to the oldest block.
    if (b == first_block || (highest ? agg > best_score : agg < best_score)) {
      best = b;
      best_score = agg;
    }
  }
  std::vector<int32_t> out(static_cast<size_t>(block_size_));
  std::iota(out.begin(), out.end(), best * block_size_);
  return out;
}

int32_t KvPolicy::num_sink_blocks() const { return (budget_.num_sinks + block_size_ - 1) / block_size_; }

int32_t KvPolicy::num_recent_blocks() const {
  return std::max(1, (budget_.num_recent + block_size_ - 1) / block_size_);
}

std::unique_ptr<KvPolicy> make_kv_policy(const KvBudget& budget, int32_t block_size) {
  const KvBudget b = validated_budget(budget, block_size);
  switch (b.policy) {
    case KvPolicyKind::kWindow:
    case KvPolicyKind::kSinks: return std::make_unique<RecencyPolicy>(b.policy, b, block_size);
    case KvPolicyKind::kH2o: return std::make_unique<HeavyHitterPolicy>(b, block_size);
    case KvPolicyKind::kTova: return std::make_unique<TovaPolicy>(b, block_size);
    case KvPolicyKind::kEntropy:
    case KvPolicyKind::kEntropyLow: return std::make_unique<EntropyPolicy>(b.policy, b, block_size);
    case KvPolicyKind::kLru: return std::make_unique<LruPolicy>(b, block_size);
    case KvPolicyKind::kFifo: return std::make_unique<FifoPolicy>(b, block_size);
    case KvPolicyKind::kOracle: return make_oracle_policy(b, block_size);
    case KvPolicyKind::kLearned: return make_learned_policy(b, block_size);
  }
  throw_error(ErrorCode::kInvalidArgument, "unknown KV policy");
}

}  // namespace kvlm
