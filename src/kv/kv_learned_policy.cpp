#include "kv/kv_learned_policy.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <unordered_map>

#include "common/assert.h"
#include "common/error.h"
#include "kv/kv_scorer.h"

namespace kvlm {
namespace {

// What the learned policy knows about each resident slot, aligned with the
// slots as KvPolicy's own statistics are.
class KvTokenStats {
 public:
  void observe_attention(int32_t first_query_slot, int32_t num_rows, int32_t num_context,
                         std::span<const float> weights) {
    grow(num_context);
    for (int32_t r = 0; r < num_rows; ++r) {
      const int32_t num_visible = std::min(first_query_slot + r + 1, num_context);
      const float* row = &weights[static_cast<size_t>(r) * num_context];
      for (int32_t s = 0; s < num_visible; ++s) {
        acc_[s] += row[s];
        recent_[s] += row[s];
        last_[s] = row[s];
        max_[s] = std::max(max_[s], row[s]);
        num_queries_[s] += 1;
      }
    }
  }
  void observe_entropy(int32_t slot, float entropy) {
    grow(slot + 1);
    entropy_[slot] = entropy;
  }
  void observe_tokens(int32_t first_slot, std::span<const int32_t> tokens) {
    grow(first_slot + static_cast<int32_t>(tokens.size()));
    for (size_t i = 0; i < tokens.size(); ++i) {
      const auto slot = static_cast<size_t>(first_slot) + i;
      token_[slot] = tokens[i];
      before_[slot] = last_token_;
      last_token_ = tokens[i];
      ++count_[tokens[i]];
      newest_[num_seen_++ % newest_.size()] = tokens[i];
    }
  }
  // kv_scorer.h lists the features in this order.
  std::array<float, kNumKvFeatures> features(int32_t slot, int64_t token, int64_t now) {
    grow(slot + 1);
    const float acc = acc_[slot];
    return {std::log1p(static_cast<float>(now - token)),
            std::log1p(static_cast<float>(token)),
            acc / std::max(1.f, num_queries_[slot]),
            std::log(1e-6f + acc),
            recent_[slot],
            last_[slot],
            max_[slot],
            entropy_[slot],
            token == 0 ? 1.f : 0.f,
            std::log1p(static_cast<float>(count_of(token_[slot]))),
            recurs_among_newest(before_[slot]) ? 1.f : 0.f};
  }
  void compact(std::span<const int32_t> from) {
    for (auto* v : {&acc_, &recent_, &last_, &max_, &num_queries_, &entropy_}) {
      std::vector<float> out(from.size(), 0.f);
      for (size_t i = 0; i < from.size(); ++i)
        if (static_cast<size_t>(from[i]) < v->size()) out[i] = (*v)[static_cast<size_t>(from[i])];
      *v = std::move(out);
    }
    std::fill(recent_.begin(), recent_.end(), 0.f);  // a new round of queries, as TOVA's
    for (auto* v : {&token_, &before_}) {
      std::vector<int32_t> out(from.size(), kNoToken);
      for (size_t i = 0; i < from.size(); ++i)
        if (static_cast<size_t>(from[i]) < v->size()) out[i] = (*v)[static_cast<size_t>(from[i])];
      *v = std::move(out);
    }
  }

 private:
  void grow(int32_t n) {
    if (static_cast<int32_t>(acc_.size()) >= n) return;
    for (auto* v : {&acc_, &recent_, &last_, &max_, &num_queries_, &entropy_}) v->resize(static_cast<size_t>(n), 0.f);
    for (auto* v : {&token_, &before_}) v->resize(static_cast<size_t>(n), kNoToken);
  }
  int32_t count_of(int32_t token) const {
    auto it = count_.find(token);
    return it == count_.end() ? 0 : it->second;
  }
  bool recurs_among_newest(int32_t token) const {
    if (token == kNoToken) return false;
    const auto end = newest_.begin() + static_cast<ptrdiff_t>(std::min(num_seen_, newest_.size()));
    return std::find(newest_.begin(), end, token) != end;
  }

  static constexpr int32_t kNoToken = -1;  // a slot whose token was never observed (a prefix-cache hit)
  std::vector<float> acc_, recent_, last_, max_, num_queries_, entropy_;  // [num_slots] each
  std::vector<int32_t> token_, before_;  // [num_slots]: its token id, and the one before it
  std::unordered_map<int32_t, int32_t> count_;  // occurrences of each token id so far
  std::array<int32_t, 16> newest_{};             // the newest token ids, a ring
  size_t num_seen_ = 0;
  int32_t last_token_ = kNoToken;
};

// Shared by both: feature statistics, and the newest token always kept.
class FeaturePolicy : public KvPolicy {
 protected:
  using KvPolicy::KvPolicy;
  void observe_attention(int32_t first_query_slot, int64_t, int32_t num_rows, int32_t num_context,
                         std::span<const float> weights) override {
    stats_.observe_attention(first_query_slot, num_rows, num_context, weights);
  }
  void observe_entropy(int32_t slot, float entropy) override { stats_.observe_entropy(slot, entropy); }
  void observe_tokens(int32_t first_slot, std::span<const int32_t> tokens) override {
    stats_.observe_tokens(first_slot, tokens);
  }
  void compact_stats(std::span<const int32_t> from) override { stats_.compact(from); }
  int64_t newest_token() const { return *std::max_element(age_.begin(), age_.end()); }
  int32_t num_recent() const { return std::max(1, budget_.num_recent); }

  mutable KvTokenStats stats_;  // grows lazily when features are read
};

class OraclePolicy final : public FeaturePolicy {
 public:
  OraclePolicy(const KvBudget& b, int32_t bs) : FeaturePolicy(KvPolicyKind::kOracle, b, bs) {}
  void observe_attention(int32_t first_query_slot, int64_t first_query_token, int32_t num_rows, int32_t num_context,
                         std::span<const float> weights) override {
    FeaturePolicy::observe_attention(first_query_slot, first_query_token, num_rows, num_context, weights);
    KvAttentionTrace& trace = *budget_.oracle;
    // Record only the first pass's rows: nothing dropped yet, so slot k is token k.
    for (int32_t r = 0; r < num_rows && num_dropped_ == 0; ++r) {
      const int64_t q = first_query_token + r;
      if (q != trace.num_rows() || q >= num_context) continue;
      trace.append_row(weights.subspan(static_cast<size_t>(r) * num_context, static_cast<size_t>(q + 1)));
    }
  }
  std::vector<int32_t> choose(int32_t num_evict) const override {
    const int64_t now = newest_token();
    std::vector<float> future(age_.size());
    for (size_t s = 0; s < age_.size(); ++s)
      future[s] = budget_.oracle->future_attention(age_[s], now, budget_.oracle_horizon);
    if (budget_.samples) record_samples(future, now);
    return lowest_by(future, num_recent(), num_evict);
  }

 private:
  // kv train-policy: each candidate's features with the log of its future
  // attention as the target (log: the choices are among the smallest values).
  void record_samples(const std::vector<float>& future, int64_t now) const {
    KvSampleSink& sink = *budget_.samples;
    sink.begin_point();
    for (int32_t s = 0; s < num_slots(); ++s) {
      if (now - age_[s] < num_recent()) continue;
      const auto f = stats_.features(s, age_[s], now);
      sink.add(f, std::log(1e-4f + future[static_cast<size_t>(s)]));
    }
  }
};

class LearnedPolicy final : public FeaturePolicy {
 public:
  LearnedPolicy(const KvBudget& b, int32_t bs) : FeaturePolicy(KvPolicyKind::kLearned, b, bs) {}
  std::vector<int32_t> choose(int32_t num_evict) const override {
    const int64_t now = newest_token();
    std::vector<float> score(age_.size());
    for (int32_t s = 0; s < num_slots(); ++s) score[s] = budget_.scorer->score(stats_.features(s, age_[s], now));
    return lowest_by(score, num_recent(), num_evict);
  }
};

}  // namespace

void KvAttentionTrace::append_row(std::span<const float> row) {
  KVLM_ASSERT(static_cast<int64_t>(row.size()) == num_rows() + 1, "trace rows come in token order");
  rows_.emplace_back(row.begin(), row.end());
}

float KvAttentionTrace::future_attention(int64_t token, int64_t now, int32_t horizon) const {
  const int64_t end = horizon > 0 ? std::min(num_rows(), now + 1 + horizon) : num_rows();
  double sum = 0;
  for (int64_t q = now + 1; q < end; ++q)
    if (token <= q) sum += rows_[static_cast<size_t>(q)][static_cast<size_t>(token)];
  return end > now + 1 ? static_cast<float>(sum / static_cast<double>(end - now - 1)) : 0.f;
}

std::unique_ptr<KvPolicy> make_oracle_policy(const KvBudget& budget, int32_t block_size) {
  if (!budget.oracle)
    throw_error(ErrorCode::kInvalidArgument,
                "kv policy oracle is offline only: it needs a first pass's attention (kvlm bench kv, perplexity)");
  return std::make_unique<OraclePolicy>(budget, block_size);
}

std::unique_ptr<KvPolicy> make_learned_policy(const KvBudget& budget, int32_t block_size) {
  if (!budget.scorer)
    throw_error(ErrorCode::kInvalidArgument, "kv policy learned needs a trained policy file (learned:POLICY.json)");
  return std::make_unique<LearnedPolicy>(budget, block_size);
}

}  // namespace kvlm
