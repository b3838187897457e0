// The oracle and learned KV policies and the scorer's fits, on hand-made
// traces, samples and weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "common/error.h"
#include "kv/kv_learned_policy.h"
#include "kv/kv_policy.h"
#include "kv/kv_scorer.h"

namespace kvlm {
namespace {

constexpr int32_t kLearnBs = 4;

// Query q's attention: 0.3 on tokens 1 and 5 (when visible), the rest on itself.
std::vector<float> trace_row(int32_t q) {
  std::vector<float> w(static_cast<size_t>(q + 1), 0.f);
  float rest = 1.f;
  for (int32_t k : {1, 5})
    if (k < q) w[k] = 0.3f, rest -= 0.3f;
  w[q] += rest;
  return w;
}

void feed_rows(KvPolicy& p, int32_t num_rows) {
  for (int32_t q = 0; q < num_rows; ++q) {
    p.grow_to(q + 1);
    const std::vector<float> w = trace_row(q);
    p.observe_attention(q, q, 1, q + 1, w);
  }
}

TEST(OraclePolicy, RecordsAFirstPassThenDropsWhatTheFutureIgnores) {
  auto trace = std::make_shared<KvAttentionTrace>();
  KvBudget record;
  record.policy = KvPolicyKind::kOracle;
  record.budget_tokens = 20;
  record.oracle = trace;
  feed_rows(*make_kv_policy(record, kLearnBs), 20);
  ASSERT_EQ(trace->num_rows(), 20);
  EXPECT_FLOAT_EQ(trace->future_attention(1, 11, 0), 0.3f);  // queries 12..19 all give token 1 0.3
  EXPECT_FLOAT_EQ(trace->future_attention(0, 11, 0), 0.f);
  EXPECT_FLOAT_EQ(trace->future_attention(12, 11, 2), 0.2f);  // queries 12 (0.4 on itself) and 13 (none)
  EXPECT_FLOAT_EQ(trace->future_attention(3, 19, 0), 0.f);    // no future left

  KvBudget b = record;
  b.budget_tokens = 8;
  auto oracle = make_kv_policy(b, kLearnBs);
  feed_rows(*oracle, 12);  // the rows exist: nothing is recorded twice
  EXPECT_EQ(trace->num_rows(), 20);
  // Tokens 1 and 5 are what queries 12..19 read; the others tie at zero and
  // the oldest go (window would drop 0..3).
  EXPECT_EQ(oracle->choose(kLearnBs), (std::vector<int32_t>{0, 2, 3, 4}));
}

TEST(OraclePolicy, AndLearnedNeedTheirData) {
  KvBudget b;
  b.budget_tokens = 8;
  b.policy = KvPolicyKind::kOracle;
  EXPECT_THROW(validated_budget(b, kLearnBs), Error);
  EXPECT_THROW(make_kv_policy(b, kLearnBs), Error);
  b.policy = KvPolicyKind::kLearned;
  EXPECT_THROW(make_kv_policy(b, kLearnBs), Error);
  EXPECT_FALSE(parse_kv_policy("oracle"));  // never a plain name: the server cannot run it
}

KvScorerWeights linear_on_feature(int32_t feature, float weight) {
  KvScorerWeights w;
  w.mean.assign(kNumKvFeatures, 0.f);
  w.stddev.assign(kNumKvFeatures, 1.f);
  w.w1.assign(kNumKvFeatures, 0.f);
  w.w1[feature] = weight;
  return w;
}

TEST(LearnedPolicy, ScoredOnRecentAttentionChoosesAsTova) {
  KvBudget b;
  b.budget_tokens = 8;
  b.policy = KvPolicyKind::kLearned;
  b.scorer = std::make_shared<const KvScorer>(linear_on_feature(4, 1.f));  // recent_attention
  auto learned = make_kv_policy(b, kLearnBs);
  b.policy = KvPolicyKind::kTova;
  b.scorer = nullptr;
  auto tova = make_kv_policy(b, kLearnBs);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  for (int32_t q = 0; q < 12; ++q) {
    std::vector<float> w(static_cast<size_t>(q + 1));
    for (float& x : w) x = u(rng);
    for (auto* p : {learned.get(), tova.get()}) {
      p->grow_to(q + 1);
      p->observe_attention(q, q, 1, q + 1, w);
    }
  }
  EXPECT_EQ(learned->choose(kLearnBs), tova->choose(kLearnBs));
  // Scored on age instead (older: higher), it keeps the oldest and drops
  // the newest candidates.
  b.policy = KvPolicyKind::kLearned;
  b.scorer = std::make_shared<const KvScorer>(linear_on_feature(0, 1.f));
  auto by_age = make_kv_policy(b, kLearnBs);
  by_age->grow_to(12);
  EXPECT_EQ(by_age->choose(kLearnBs), (std::vector<int32_t>{7, 8, 9, 10}));
}

// Feeds `ids` one token a step, uniform attention, to a learned policy
// scored on one feature alone.
std::unique_ptr<KvPolicy> learned_on_tokens(int32_t feature, const std::vector<int32_t>& ids) {
  KvBudget b;
  b.budget_tokens = 8;
  b.policy = KvPolicyKind::kLearned;
  b.scorer = std::make_shared<const KvScorer>(linear_on_feature(feature, 1.f));
  auto p = make_kv_policy(b, kLearnBs);
  for (int32_t q = 0; q < static_cast<int32_t>(ids.size()); ++q) {
    p->grow_to(q + 1);
    const std::vector<float> w(static_cast<size_t>(q + 1), 1.f / static_cast<float>(q + 1));
    p->observe_attention(q, q, 1, q + 1, w);
    p->observe_tokens(q, std::span<const int32_t>(ids).subspan(static_cast<size_t>(q), 1));
  }
  return p;
}

// Scored on how often its token id occurred so far, the policy drops the
// rarest tokens (ties: the oldest).
TEST(LearnedPolicy, TokenCountKeepsRecurringIds) {
  // id 7 at slots 2, 5, 9; id 3 at 4 and 11; the rest once.
  const std::vector<int32_t> ids = {1, 2, 7, 8, 3, 7, 10, 11, 12, 7, 14, 3};
  EXPECT_EQ(learned_on_tokens(9, ids)->choose(kLearnBs), (std::vector<int32_t>{0, 1, 3, 6}));
}

// Scored on whether the token before a slot recurs among the newest 16, it
// keeps the slot an induction head would read: 24 distinct ids but a 3 at
// slots 4 and 23, so of slots 0..8 (whose predecessors left the newest 16)
// only slot 5, after the 3, scores.
TEST(LearnedPolicy, InductionKeepsTheTokenAfterARecurringOne) {
  std::vector<int32_t> ids(24);
  for (int32_t i = 0; i < 24; ++i) ids[static_cast<size_t>(i)] = 100 + i;
  ids[4] = ids[23] = 3;
  EXPECT_EQ(learned_on_tokens(10, ids)->choose(2 * kLearnBs), (std::vector<int32_t>{0, 1, 2, 3, 4, 6, 7, 8}));
}

// Samples whose target is f(features) on random features.
KvSampleSink planted_samples(float (*f)(const float*), int32_t num_points, int32_t per_point) {
  KvSampleSink s;
  std::mt19937 rng(7);
  std::normal_distribution<float> n(0.f, 1.f);
  for (int32_t p = 0; p < num_points; ++p) {
    s.begin_point();
    for (int32_t i = 0; i < per_point; ++i) {
      std::vector<float> x(kNumKvFeatures);
      for (float& v : x) v = n(rng);
      s.add(x, f(x.data()));
    }
  }
  return s;
}

TEST(KvScorer, LinearFitRecoversAPlantedModel) {
  const KvSampleSink s = planted_samples([](const float* x) { return 2.f * x[0] - x[3] + 0.5f; }, 20, 50);
  const KvScorer scorer(fit_linear(s, 0.0));
  std::vector<float> x(kNumKvFeatures, 0.f);
  x[0] = 1, x[3] = 2;
  EXPECT_NEAR(scorer.score(x), 2.f - 2.f + 0.5f, 1e-3);
  EXPECT_DOUBLE_EQ(eviction_agreement(scorer, s, 4), 1.0);
}

TEST(KvScorer, MlpFitsWhatALineCannot) {
  const KvSampleSink s = planted_samples([](const float* x) { return x[0] * x[0]; }, 20, 100);
  const KvScorer line(fit_linear(s)), mlp(fit_mlp(s, 16, 200));
  double line_err = 0, mlp_err = 0;
  for (size_t i = 0; i < s.num_rows(); ++i) {
    const std::span<const float> x(&s.x[i * kNumKvFeatures], kNumKvFeatures);
    line_err += std::pow(line.score(x) - s.y[i], 2);
    mlp_err += std::pow(mlp.score(x) - s.y[i], 2);
  }
  EXPECT_LT(mlp_err, 0.2 * line_err);
  EXPECT_GT(eviction_agreement(mlp, s, 4), eviction_agreement(line, s, 4));
}

TEST(KvScorer, RejectsWeightsOfTheWrongShape) {
  KvScorerWeights w = linear_on_feature(0, 1.f);
  w.w1.pop_back();
  EXPECT_THROW(KvScorer{w}, Error);
  w = linear_on_feature(0, 1.f);
  w.stddev[2] = 0.f;
  EXPECT_THROW(KvScorer{w}, Error);
  w = linear_on_feature(0, 1.f);
  w.num_hidden = 2;  // an MLP needs 2 x features, b1 and w2
  EXPECT_THROW(KvScorer{w}, Error);
}

}  // namespace
}  // namespace kvlm
