// KV eviction policies: exactly which tokens or blocks each one drops, on
// hand-made statistics.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "common/error.h"
#include "kv/kv_policy.h"

namespace kvlm {
namespace {

constexpr int32_t kPolicyBs = 4;

std::unique_ptr<KvPolicy> policy(KvPolicyKind kind, int32_t budget, int32_t num_sinks = 2) {
  KvBudget b;
  b.budget_tokens = budget;
  b.policy = kind;
  b.num_sinks = num_sinks;
  auto p = make_kv_policy(b, kPolicyBs);
  p->grow_to(budget + kPolicyBs);  // the point where the manager fires it
  return p;
}

std::vector<int32_t> range(int32_t begin, int32_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), begin);
  return v;
}

// One query row per call, attending with `weights` over `ctx` slots.
void attend(KvPolicy& p, int32_t query_slot, int64_t token, const std::vector<float>& weights) {
  p.observe_attention(query_slot, token, 1, static_cast<int32_t>(weights.size()), weights);
}

TEST(KvPolicy, NamesRoundTripAndUnknownIsNone) {
  for (KvPolicyKind k : all_kv_policies()) EXPECT_EQ(parse_kv_policy(kv_policy_name(k)), k);
  EXPECT_FALSE(parse_kv_policy("lfu"));
  EXPECT_EQ(kv_policy_names(), "window, sinks, h2o, tova, entropy, entropy-low, lru, fifo");
}

TEST(KvPolicy, BudgetIsRoundedToBlocksAndMustLeaveACandidate) {
  KvBudget b;
  b.budget_tokens = 9;
  b.num_sinks = 4;
  EXPECT_EQ(validated_budget(b, kPolicyBs).budget_tokens, 12);
  b.budget_tokens = 4;  // one block: no room for a sink block and a candidate
  EXPECT_THROW(validated_budget(b, kPolicyBs), Error);
  b.num_sinks = 9;  // three sink blocks need a budget of four blocks
  b.budget_tokens = 12;
  EXPECT_THROW(validated_budget(b, kPolicyBs), Error);
  b.budget_tokens = 16;
  EXPECT_NO_THROW(validated_budget(b, kPolicyBs));
}

TEST(KvPolicy, WindowDropsTheOldestAndSinksKeepTheFirst) {
  EXPECT_EQ(policy(KvPolicyKind::kWindow, 8)->choose(kPolicyBs), range(0, 4));
  EXPECT_EQ(policy(KvPolicyKind::kSinks, 8, 2)->choose(kPolicyBs), range(2, 4));
  EXPECT_EQ(policy(KvPolicyKind::kSinks, 8, 0)->choose(kPolicyBs), range(0, 4));
}

TEST(KvPolicy, HeavyHittersKeepTheRecentHalfAndTheMostAttended) {
  auto p = policy(KvPolicyKind::kH2o, 8);  // 12 slots; the last 4 (budget / 2) are kept
  // Two queries: slots 1, 3, 5, 7 get most of the attention.
  std::vector<float> w(12, 0.01f);
  for (int s : {1, 3, 5, 7}) w[s] = 0.2f;
  attend(*p, 10, 10, w);
  attend(*p, 11, 11, w);
  // Slot 6 gets a little more than the rest, so the tie is broken by it.
  std::vector<float> extra(12, 0.f);
  extra[6] = 0.005f;
  attend(*p, 11, 11, extra);
  EXPECT_EQ(p->choose(kPolicyBs), (std::vector<int32_t>{0, 2, 4, 6}));
  EXPECT_NE(p->choose(kPolicyBs), (std::vector<int32_t>{0, 2, 4, 5}));
}

TEST(KvPolicy, HeavyHittersTieGoesToTheOldest) {
  auto p = policy(KvPolicyKind::kH2o, 8);
  EXPECT_EQ(p->choose(kPolicyBs), range(0, 4));  // all zero: the oldest candidates
}

TEST(KvPolicy, TovaSumsTheQueriesSinceTheLastEviction) {
  auto p = policy(KvPolicyKind::kTova, 8);
  std::vector<float> a(12, 0.1f), b(12, 0.1f);
  for (int s : {0, 5, 8}) a[s] = 0.01f;  // both queries dislike 0, 5, 8 ...
  for (int s : {0, 5, 8}) b[s] = 0.01f;
  a[9] = 0.f;    // ... the first also 9,
  b[9] = 0.15f;  // which the second likes: 9 sums to 0.15 > 2 * 0.01
  a[3] = b[3] = 0.05f;
  a[11] = b[11] = 0.f;  // the newest token: never a candidate
  attend(*p, 10, 10, a);
  attend(*p, 11, 11, b);
  EXPECT_EQ(p->choose(kPolicyBs), (std::vector<int32_t>{0, 3, 5, 8}));
  // A new round after an eviction: old attention no longer counts.
  p->on_evict(p->choose(kPolicyBs));
  p->grow_to(12);
  std::vector<float> c(12, 0.5f);
  for (int s : {1, 2, 6, 7}) c[s] = 0.f;
  attend(*p, 11, 12, c);
  EXPECT_EQ(p->choose(kPolicyBs), (std::vector<int32_t>{1, 2, 6, 7}));
}

TEST(KvPolicy, RecencyFollowsTokenAgeAfterSlotsAreReordered) {
  auto p = policy(KvPolicyKind::kH2o, 8);  // 12 slots; the newest 4 tokens stay
  // A compaction moved the newest tokens (ages 8..11) into slots 0..3.
  p->on_compact(std::vector<int32_t>{8, 9, 10, 11, 4, 5, 6, 7, 0, 1, 2, 3});
  p->grow_to(12);
  std::vector<float> w(12, 0.5f);
  attend(*p, 11, 11, w);
  // Equal scores: the oldest tokens (now in slots 8..11) go, never slots 0..3.
  EXPECT_EQ(p->choose(kPolicyBs), range(8, 4));
}

TEST(KvPolicy, RecentWindowIsKeptWhereAsked) {
  KvBudget b;
  b.budget_tokens = 16;
  b.policy = KvPolicyKind::kTova;
  b.num_recent = 12;  // of 20 slots only 0..7 are candidates
  auto p = make_kv_policy(b, kPolicyBs);
  p->grow_to(20);
  std::vector<float> w(20, 1.f);
  for (int s = 12; s < 20; ++s) w[s] = 0.f;  // the least attended are all recent
  attend(*p, 19, 19, w);
  EXPECT_EQ(p->choose(kPolicyBs), range(0, 4));
  b.num_recent = 17;
  EXPECT_THROW(make_kv_policy(b, kPolicyBs), Error);
}

TEST(KvPolicy, EntropyDropsTheBlockWithHighestOrLowestMean) {
  for (KvPolicyKind kind : {KvPolicyKind::kEntropy, KvPolicyKind::kEntropyLow}) {
    auto p = policy(kind, 16, 2);  // 20 slots = 5 blocks; block 0 (sinks) and 4 (newest) kept
    const float mean[] = {9.f, 1.f, 3.f, 2.f, 0.f};
    for (int32_t s = 0; s < 20; ++s) p->observe_entropy(s, mean[s / kPolicyBs] + (s % 2 ? 0.5f : -0.5f));
    // Highest candidate mean: block 2; lowest: block 1. Never block 0 or 4.
    EXPECT_EQ(p->choose(kPolicyBs), range(kind == KvPolicyKind::kEntropy ? 8 : 4, 4)) << kv_policy_name(kind);
  }
}

TEST(KvPolicy, LruDropsTheBlockUsedLeastRecently) {
  auto p = policy(KvPolicyKind::kLru, 16, 2);  // 20 slots; candidates: blocks 1, 2, 3
  std::vector<float> w(20, 0.f);
  w[5] = 0.9f;   // block 1 used at token 100
  attend(*p, 19, 100, w);
  w.assign(20, 0.f);
  w[13] = 0.9f;  // block 3 used at token 101
  attend(*p, 19, 101, w);
  w.assign(20, 0.f);
  w[9] = 0.04f;  // block 2: below the uniform share (1/20): not a use
  attend(*p, 19, 102, w);
  EXPECT_EQ(p->choose(kPolicyBs), range(8, 4));
  w.assign(20, 0.f);
  w[10] = 0.5f;  // now block 2 is used; block 1 is the oldest use
  attend(*p, 19, 103, w);
  EXPECT_EQ(p->choose(kPolicyBs), range(4, 4));
}

TEST(KvPolicy, FifoDropsTheOldestBlockAfterTheSinks) {
  EXPECT_EQ(policy(KvPolicyKind::kFifo, 16, 2)->choose(kPolicyBs), range(4, 4));
  EXPECT_EQ(policy(KvPolicyKind::kFifo, 16, 0)->choose(kPolicyBs), range(0, 4));
  EXPECT_EQ(policy(KvPolicyKind::kFifo, 16, 5)->choose(kPolicyBs), range(8, 4));
}

TEST(KvPolicy, StatisticsFollowTheSlotsAfterAnEviction) {
  auto p = policy(KvPolicyKind::kH2o, 8);
  std::vector<float> w(12);
  for (int32_t s = 0; s < 12; ++s) w[s] = static_cast<float>(12 - s);  // older slots heavier
  attend(*p, 11, 11, w);
  const std::vector<int32_t> gone = p->choose(kPolicyBs);
  EXPECT_EQ(gone, range(4, 4));  // 0..3 are the heaviest; 4..7 the lightest outside the recent half
  p->on_evict(gone);
  EXPECT_EQ(p->num_slots(), 8);
  p->grow_to(12);
  // Slots 0..3 keep their weights (12..9), 4..7 are the old 8..11 (4..1), 8..11 are new (0).
  EXPECT_EQ(p->choose(kPolicyBs), range(4, 4));
}

}  // namespace
}  // namespace kvlm
