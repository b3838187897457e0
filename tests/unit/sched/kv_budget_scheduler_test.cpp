// The scheduler with KV budgets: memory stays within budget + one block over
// long generations for every policy, steps stop at eviction points, positions
// run apart from slots, and length limits follow --kv-shift.
#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "common/error.h"
#include "sched/scheduler.h"

namespace kvlm {
namespace {

constexpr int32_t kBs = 16;

std::unique_ptr<Request> request(int64_t id, int32_t num_prompt, int32_t max_tokens, KvBudget b) {
  auto r = std::make_unique<Request>();
  r->id = RequestId(id);
  r->tokens.resize(static_cast<size_t>(num_prompt));
  std::iota(r->tokens.begin(), r->tokens.end(), static_cast<int32_t>(1000 * id));
  r->max_tokens = max_tokens;
  r->kv_budget = b;
  return r;
}

Scheduler scheduler(int32_t num_blocks, int32_t max_model_len, int32_t token_budget = 512) {
  KvCacheConfig kc;
  kc.num_blocks = num_blocks;
  kc.block_size = kBs;
  kc.enable_prefix_caching = true;
  return Scheduler(SchedulerConfig{token_budget, 64, max_model_len}, kc);
}

// Statistics as the runner would report them, from a seeded generator.
SeqKvStats fake_stats(const ScheduledSeq& s, std::mt19937& rng) {
  SeqKvStats st;
  const auto n = static_cast<int32_t>(s.new_tokens.size());
  std::uniform_real_distribution<float> u(0.f, 1.f);
  if (s.collect_attention) {
    const int32_t ctx = s.slot_begin + n;
    st.attention.resize(static_cast<size_t>(n) * ctx);
    for (float& w : st.attention) w = u(rng) / static_cast<float>(ctx);
  }
  if (s.collect_entropy) {
    st.entropy.resize(static_cast<size_t>(n));
    for (float& e : st.entropy) e = 3.f * u(rng);
  }
  return st;
}

class KvBudgetPolicies : public ::testing::TestWithParam<KvPolicyKind> {};

TEST_P(KvBudgetPolicies, TenThousandTokensStayWithinBudgetPlusOneBlock) {
  KvBudget b;
  b.budget_tokens = 64;
  b.policy = GetParam();
  b.shift = true;  // unbounded positions: the generation may run past the context
  Scheduler sched = scheduler(64, 512);
  sched.add_request(request(1, 100, 10000, b));
  std::mt19937 rng(7);
  int32_t num_generated = 0, max_resident = 0, max_blocks = 0;
  int64_t num_ops = 0;
  BlockTableMirror mirror;  // the runner's copy of the table, from the changes alone
  while (sched.has_unfinished()) {
    SchedulerOutput out = sched.schedule();
    num_ops += static_cast<int64_t>(out.kv_ops.size());
    ASSERT_EQ(out.seqs.size(), 1u);
    const ScheduledSeq& s = out.seqs[0];
    const std::vector<int32_t>& mirrored = mirror.apply(s.id, s.table_changes)[0].ids;
    const BlockTable& table = sched.kv().table(s.id, 0);  // after evictions' copies and compactions
    ASSERT_EQ(mirrored.size(), table.size());
    for (size_t i = 0; i < table.size(); ++i) ASSERT_EQ(mirrored[i], table[i].value()) << "entry " << i;
    max_resident = std::max(max_resident, s.slot_begin + static_cast<int32_t>(s.new_tokens.size()));
    max_blocks = std::max(max_blocks, sched.kv().pool().num_used_blocks());
    // Positions are slots with --kv-shift: they never pass budget + one block.
    EXPECT_EQ(s.position_begin, s.slot_begin);
    std::vector<int32_t> sampled;
    if (s.sample) sampled.push_back(static_cast<int32_t>(rng() % 500));
    std::vector<SeqKvStats> stats = {fake_stats(s, rng)};
    num_generated += static_cast<int32_t>(sampled.size());
    sched.update(out, sampled, stats);
  }
  EXPECT_EQ(num_generated, 10000);
  EXPECT_EQ(max_resident, 64 + kBs);
  EXPECT_LE(max_blocks, 64 / kBs + 1);
  EXPECT_EQ(sched.kv().num_evicted_tokens(GetParam()), kBs * ((100 + 10000 - 1 - 64) / kBs));
  EXPECT_EQ(sched.kv().pool().num_free_blocks(), 64);
  if (!kv_policy_is_block_granular(GetParam()) && GetParam() != KvPolicyKind::kWindow) {
    EXPECT_GT(num_ops, 0);  // token policies compact (and, with the shift, re-rotate)
  }
}

INSTANTIATE_TEST_SUITE_P(AllPolicies, KvBudgetPolicies, ::testing::ValuesIn(all_kv_policies().begin(), all_kv_policies().end()),
                         [](const auto& info) {
                           std::string n(kv_policy_name(info.param));
                           for (char& c : n) c = c == '-' ? '_' : c;
                           return n;
                         });

TEST(KvBudgetScheduler, PrefillChunksStopAtEachEvictionPoint) {
  KvBudget b;
  b.budget_tokens = 32;
  b.policy = KvPolicyKind::kSinks;
  Scheduler sched = scheduler(64, 512);
  sched.add_request(request(1, 200, 4, b));
  std::vector<int32_t> chunks, positions;
  while (sched.has_unfinished()) {
    SchedulerOutput out = sched.schedule();
    const ScheduledSeq& s = out.seqs[0];
    chunks.push_back(static_cast<int32_t>(s.new_tokens.size()));
    positions.push_back(s.position_begin);
    sched.update(out, s.sample ? std::vector<int32_t>{1} : std::vector<int32_t>{});
  }
  // 48 first (budget + a block), then a block at a time; positions keep counting.
  const std::vector<int32_t> expected_chunks = {48, 16, 16, 16, 16, 16, 16, 16, 16, 16, 8, 1, 1, 1};
  EXPECT_EQ(chunks, expected_chunks);
  EXPECT_EQ(positions[1], 48);
  EXPECT_EQ(positions.back(), 202);
}

TEST(KvBudgetScheduler, OnlyShiftRunsPastTheContext) {
  KvBudget b;
  b.budget_tokens = 32;
  Scheduler sched = scheduler(64, 128);
  EXPECT_THROW(sched.add_request(request(1, 200, 4, b)), Error);  // prompt past the context
  auto r = request(2, 100, 1000, b);
  Request* raw = r.get();
  sched.add_request(std::move(r));
  EXPECT_EQ(raw->max_tokens, 28);  // clamped to the context without a shift
  b.shift = true;
  auto s = request(3, 200, 1000, b);
  Request* shifted = s.get();
  EXPECT_NO_THROW(sched.add_request(std::move(s)));
  EXPECT_EQ(shifted->max_tokens, 1000);
}

TEST(KvBudgetScheduler, ModelsWithWindowGroupsRefuseBudgets) {
  KvCacheConfig kc;
  kc.num_blocks = 64;
  kc.block_size = kBs;
  kc.group_windows = {0, 32};
  Scheduler sched(SchedulerConfig{512, 64, 512}, kc);
  KvBudget b;
  b.budget_tokens = 32;
  EXPECT_THROW(sched.add_request(request(1, 10, 4, b)), Error);
}

}  // namespace
}  // namespace kvlm
