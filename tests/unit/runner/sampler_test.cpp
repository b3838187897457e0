// Sampler: each filter on logits with known answers, and reproducible seeds.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>

#include "common/error.h"
#include "runner/sampler.h"

namespace kvlm {
namespace {

SamplingParams params(float temp, int top_k = 0, float top_p = 1.f, float min_p = 0.f) {
  SamplingParams p;
  p.temperature = temp;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.repetition_penalty = 1.f;
  p.seed = 42;
  return p;
}

// Logits whose softmax is {0.5, 0.25, 0.125, 0.0625, 0.0625}.
const std::vector<float> kLogits = {std::log(8.f), std::log(4.f), std::log(2.f), 0.f, 0.f};

std::map<int32_t, int> histogram(Sampler& s, const std::vector<float>& logits, int n) {
  std::map<int32_t, int> h;
  for (int i = 0; i < n; ++i) h[s.sample(logits, {})]++;
  return h;
}

TEST(Sampler, GreedyIsArgmax) {
  Sampler s(params(0.f));
  EXPECT_EQ(s.sample(std::vector<float>{0.1f, 3.f, -1.f, 2.9f}, {}), 1);
  EXPECT_EQ(argmax(std::vector<float>{1.f, 5.f, 5.f}), 1);  // first on ties
}

TEST(Sampler, PlainGreedyEqualsTheCandidatePath) {
  // Plain greedy reads the row directly; a zero logit bias sends the same row
  // through the candidate path. Ties, NaN and -inf must pick the same token.
  Sampler fast(params(0.f));
  SamplingParams p = params(0.f);
  p.logit_bias = {{0, 0.f}};
  Sampler slow(p);
  std::mt19937 rng(3);
  const float nan = std::nanf(""), inf = std::numeric_limits<float>::infinity();
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> row(1 + rng() % 40);
    for (float& x : row) {
      const uint32_t k = rng() % 10;
      x = k == 0 ? nan : k == 1 ? -inf : static_cast<float>(rng() % 4);  // few values: many ties
    }
    EXPECT_EQ(fast.sample(row, {}), slow.sample(row, {})) << "trial " << trial;
  }
  EXPECT_EQ(fast.sample(std::vector<float>{nan, 1.f}, {}), 1);
  EXPECT_EQ(fast.sample(std::vector<float>{nan, nan}, {}), 0);
}

TEST(Sampler, TopKOneIsGreedy) {
  Sampler s(params(1.5f, 1));
  for (int i = 0; i < 50; ++i) EXPECT_EQ(s.sample(kLogits, {}), 0);
}

TEST(Sampler, TopKLimitsTheCandidates) {
  Sampler s(params(1.f, 2));
  auto h = histogram(s, kLogits, 3000);
  EXPECT_EQ(h.size(), 2u);
  EXPECT_NEAR(h[0] / 3000.0, 2.0 / 3.0, 0.04);  // 0.5 / (0.5 + 0.25)
}

TEST(Sampler, TopPKeepsTheSmallestNucleus) {
  Sampler s(params(1.f, 0, 0.7f));  // 0.5 + 0.25 >= 0.7: tokens 0 and 1
  auto h = histogram(s, kLogits, 2000);
  EXPECT_EQ(h.size(), 2u);
  EXPECT_TRUE(h.count(0) && h.count(1));
}

TEST(Sampler, MinPDropsUnlikelyTokens) {
  Sampler s(params(1.f, 0, 1.f, 0.3f));  // keep p >= 0.15: tokens 0 and 1
  auto h = histogram(s, kLogits, 2000);
  EXPECT_EQ(h.size(), 2u);
}

TEST(Sampler, TemperatureFollowsTheDistribution) {
  Sampler s(params(1.f));
  auto h = histogram(s, kLogits, 20000);
  EXPECT_NEAR(h[0] / 20000.0, 0.5, 0.02);
  EXPECT_NEAR(h[2] / 20000.0, 0.125, 0.015);
  // A high temperature flattens it.
  Sampler hot(params(100.f));
  auto hh = histogram(hot, kLogits, 20000);
  EXPECT_NEAR(hh[0] / 20000.0, 0.2, 0.02);
}

TEST(Sampler, RepetitionPenaltyDemotesSeenTokens) {
  SamplingParams p = params(0.f);
  p.repetition_penalty = 2.f;
  Sampler s(p);
  std::vector<float> logits = {3.f, 2.f, -1.f};
  std::vector<int32_t> history = {0};
  EXPECT_EQ(s.sample(logits, history), 1);  // 3 / 2 = 1.5 < 2
  p.repeat_last_n = 1;
  Sampler s2(p);
  std::vector<int32_t> older = {0, 2};  // only the last token (2) is penalised
  EXPECT_EQ(s2.sample(logits, older), 0);
}

TEST(Sampler, SeedIsReproducible) {
  std::vector<float> logits(64);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(std::sin(i * 1.7));
  auto draw = [&](uint64_t seed) {
    SamplingParams p = params(1.f);
    p.seed = seed;
    Sampler s(p);
    std::vector<int32_t> out;
    for (int i = 0; i < 32; ++i) out.push_back(s.sample(logits, {}));
    return out;
  };
  EXPECT_EQ(draw(7), draw(7));
  EXPECT_NE(draw(7), draw(8));
}

TEST(Sampler, BadParametersAreRefused) {
  SamplingParams p;
  p.temperature = -1.f;
  EXPECT_THROW(p.validate(), Error);
  p = SamplingParams{};
  p.top_p = 0.f;
  EXPECT_THROW(p.validate(), Error);
  p = SamplingParams{};
  p.min_p = 1.5f;
  EXPECT_THROW(p.validate(), Error);
  p = SamplingParams{};
  p.repetition_penalty = 0.f;
  EXPECT_THROW(p.validate(), Error);
  EXPECT_NO_THROW(SamplingParams{}.validate());
}

}  // namespace
}  // namespace kvlm

namespace kvlm {
namespace {

TEST(Sampler, LogitBiasAndOpenAiPenalties) {
  SamplingParams p;
  p.temperature = 0.f;
  p.logit_bias = {{2, 5.f}};
  Sampler biased(p);
  EXPECT_EQ(biased.sample(std::vector<float>{3.f, 2.f, -1.f}, {}), 2);  // -1 + 5 = 4

  SamplingParams q;
  q.temperature = 0.f;
  q.frequency_penalty = 1.f;
  Sampler freq(q);
  std::vector<float> logits = {3.f, 2.5f, 0.f};
  std::vector<int32_t> once = {0};
  EXPECT_EQ(freq.sample(logits, once), 1);  // 3 - 1 < 2.5
  q.frequency_penalty = 0.f;
  q.presence_penalty = 0.4f;
  Sampler presence(q);
  std::vector<int32_t> twice = {0, 0};
  EXPECT_EQ(presence.sample(logits, twice), 0);  // 3 - 0.4 > 2.5: presence counts once
  q.presence_penalty = 3.f;
  EXPECT_THROW(q.validate(), Error);
}

// log_softmax of the raw logits, whatever the sampling parameters; the top
// list is ordered, ties by lower id, and clamped to the vocabulary.
TEST(TokenLogprobs, AreTheModelsLogSoftmax) {
  SampledLogprobs lp = token_logprobs(kLogits, 2, 3);
  EXPECT_EQ(lp.chosen.token, 2);
  EXPECT_NEAR(lp.chosen.logprob, std::log(0.125), 1e-6);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].token, 0);
  EXPECT_NEAR(lp.top[0].logprob, std::log(0.5), 1e-6);
  EXPECT_EQ(lp.top[1].token, 1);
  EXPECT_EQ(lp.top[2].token, 2);
  // Ties (ids 3 and 4) go to the lower id; asking for more than the vocabulary gives it all.
  lp = token_logprobs(kLogits, 4, 50);
  ASSERT_EQ(lp.top.size(), 5u);
  EXPECT_EQ(lp.top[3].token, 3);
  EXPECT_EQ(lp.top[4].token, 4);
  EXPECT_NEAR(lp.chosen.logprob, std::log(0.0625), 1e-6);
  EXPECT_TRUE(token_logprobs(kLogits, 0, 0).top.empty());
  // Large logits do not overflow: the row is shifted by its maximum.
  std::vector<float> big = {1000.f, 1000.f};
  EXPECT_NEAR(token_logprobs(big, 1, 0).chosen.logprob, std::log(0.5), 1e-6);
}

}  // namespace
}  // namespace kvlm
