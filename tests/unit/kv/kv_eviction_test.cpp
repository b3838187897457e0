// KvCacheManager under KV budgets: the exact block frees, slot moves, block
// copies and key rotations an eviction emits.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "unit/kv/kv_test_helpers.h"

namespace kvlm {
namespace {

using test::ids;

constexpr int32_t kBs = 4;

KvCacheManager manager(int32_t num_blocks, bool caching) {
  KvCacheConfig c;
  c.num_blocks = num_blocks;
  c.block_size = kBs;
  c.enable_prefix_caching = caching;
  return KvCacheManager(c);
}

KvBudget budget(KvPolicyKind kind, int32_t tokens, int32_t sinks, bool shift = false) {
  KvBudget b;
  b.budget_tokens = tokens;
  b.policy = kind;
  b.num_sinks = sinks;
  b.shift = shift;
  return b;
}

std::vector<int32_t> tokens(int32_t n, int32_t start = 100) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

TEST(KvEviction, StopsTheStepAtTheBudgetPlusOneBlock) {
  KvCacheManager kv = manager(16, false);
  const KvBudget b = budget(KvPolicyKind::kSinks, 8, 2);
  EXPECT_EQ(kv.max_new_tokens(RequestId(1), b), 12);
  EXPECT_EQ(kv.max_new_tokens(RequestId(1), KvBudget{}), INT32_MAX);
  ASSERT_TRUE(kv.allocate(RequestId(1), 10, nullptr, b));
  ASSERT_TRUE(kv.on_computed(RequestId(1), tokens(10), 10));
  EXPECT_EQ(kv.max_new_tokens(RequestId(1), b), 2);
  EXPECT_TRUE(kv.take_ops().empty());
}

TEST(KvEviction, TokenPolicyCompactsSurvivorsWithExactMoves) {
  KvCacheManager kv = manager(16, false);
  const RequestId id(1);
  ASSERT_TRUE(kv.allocate(id, 12, nullptr, budget(KvPolicyKind::kTova, 8, 0)));
  EXPECT_EQ(kv.table(id, 0).blocks(), ids({0, 1, 2}));
  // TOVA: the newest queries ignored slots 1, 2, 5 and 9.
  std::vector<float> w(12, 0.1f);
  for (int s : {1, 2, 5, 9}) w[s] = 0.f;
  kv.observe_attention(id, 11, 11, 1, 12, w);
  ASSERT_TRUE(kv.on_computed(id, tokens(12), 12));
  // The holes below the new end (1, 2, 5) take the survivors past it (8, 10,
  // 11): three moves, and block 2 empties.
  const KvOps expected = {KvOp::move_slot(0, 8, 1), KvOp::move_slot(0, 10, 2), KvOp::move_slot(0, 11, 5)};
  EXPECT_EQ(kv.take_ops(), expected);
  EXPECT_EQ(kv.table(id, 0).blocks(), ids({0, 1}));
  EXPECT_EQ(kv.num_resident(id), 8);
  EXPECT_EQ(kv.num_evicted(id), 4);
  EXPECT_EQ(kv.pool().num_used_blocks(), 2);
  EXPECT_EQ(kv.num_evicted_tokens(KvPolicyKind::kTova), 4);
  // 4 more tokens reach the budget again; they go to a fresh block.
  EXPECT_EQ(kv.max_new_tokens(id, budget(KvPolicyKind::kTova, 8, 0)), 4);
  ASSERT_TRUE(kv.allocate(id, 4));
  EXPECT_EQ(kv.table(id, 0).blocks(), ids({0, 1, 3}));  // block 2 went to the back of the free queue
  kv.free(id);
  EXPECT_EQ(kv.pool().num_free_blocks(), 16);
}

TEST(KvEviction, WithTheShiftSurvivorsKeepTheirOrder) {
  KvCacheManager kv = manager(16, false);
  const RequestId id(1);
  ASSERT_TRUE(kv.allocate(id, 12, nullptr, budget(KvPolicyKind::kTova, 8, 0, /*shift=*/true)));
  std::vector<float> w(12, 0.1f);
  for (int s : {1, 2, 5, 9}) w[s] = 0.f;
  kv.observe_attention(id, 11, 11, 1, 12, w);
  ASSERT_TRUE(kv.on_computed(id, tokens(12), 12));
  // Positions are slots: 0, 3, 4, 6, 7, 8, 10, 11 move down to 0..7 in order
  // and every moved key re-rotates by how far it moved.
  const KvOps expected = {
      KvOp::move_slot(0, 3, 1),  KvOp::move_slot(0, 4, 2),  KvOp::move_slot(0, 6, 3),  KvOp::move_slot(0, 7, 4),
      KvOp::move_slot(0, 8, 5),  KvOp::move_slot(0, 10, 6), KvOp::move_slot(0, 11, 7), KvOp::rotate_key(0, 1, -2),
      KvOp::rotate_key(0, 2, -2), KvOp::rotate_key(0, 3, -3), KvOp::rotate_key(0, 4, -3), KvOp::rotate_key(0, 5, -3),
      KvOp::rotate_key(0, 6, -4), KvOp::rotate_key(0, 7, -4)};
  EXPECT_EQ(kv.take_ops(), expected);
  kv.free(id);
}

TEST(KvEviction, ARunAcrossTwoBlocksMovesOnlyTheTokensBeforeIt) {
  KvCacheManager kv = manager(16, false);
  const RequestId id(1);
  ASSERT_TRUE(kv.allocate(id, 12, nullptr, budget(KvPolicyKind::kSinks, 8, 2)));
  ASSERT_TRUE(kv.on_computed(id, tokens(12), 12));
  // Sinks 0, 1 stay and 2..5 go: block 1 (6, 7 at offsets 2, 3) takes the
  // sinks at offsets 0, 1 and becomes the first block; block 0 leaves.
  const KvOps expected = {KvOp::move_slot(0, 0, 4), KvOp::move_slot(0, 1, 5)};
  EXPECT_EQ(kv.take_ops(), expected);
  EXPECT_EQ(kv.table(id, 0).blocks(), ids({1, 2}));
  EXPECT_EQ(kv.num_resident(id), 8);
  kv.free(id);
  EXPECT_EQ(kv.pool().num_free_blocks(), 16);
}

TEST(KvEviction, ARunWithTheShiftReRotatesWhatFollowsIt) {
  KvCacheManager kv = manager(16, false);
  const RequestId id(1);
  ASSERT_TRUE(kv.allocate(id, 12, nullptr, budget(KvPolicyKind::kSinks, 8, 2, /*shift=*/true)));
  ASSERT_TRUE(kv.on_computed(id, tokens(12), 12));
  // New slots 2..7 (blocks 1 offsets 2, 3 and block 2) are 4 positions earlier.
  const KvOps expected = {KvOp::move_slot(0, 0, 4),       KvOp::move_slot(0, 1, 5),
                          KvOp::rotate_key(0, 6, -4),     KvOp::rotate_key(0, 7, -4),
                          KvOp::rotate_key(0, 8, -4),     KvOp::rotate_key(0, 9, -4),
                          KvOp::rotate_key(0, 10, -4),    KvOp::rotate_key(0, 11, -4)};
  EXPECT_EQ(kv.take_ops(), expected);
  kv.free(id);
}

TEST(KvEviction, WholeBlocksLeaveTheTableWithoutMoves) {
  KvCacheManager kv = manager(16, false);
  const RequestId id(1);
  ASSERT_TRUE(kv.allocate(id, 12, nullptr, budget(KvPolicyKind::kFifo, 8, 2)));
  ASSERT_TRUE(kv.on_computed(id, tokens(12), 12));
  EXPECT_TRUE(kv.take_ops().empty());  // block 1 dropped: later slots renumber, no bytes move
  EXPECT_EQ(kv.table(id, 0).blocks(), ids({0, 2}));
  EXPECT_EQ(kv.pool().free_queue_order().back(), BlockId(1));
  kv.free(id);
}

TEST(KvEviction, ShiftReRotatesEveryKeyThatChangedPosition) {
  KvCacheManager kv = manager(16, false);
  const RequestId id(1);
  ASSERT_TRUE(kv.allocate(id, 12, nullptr, budget(KvPolicyKind::kFifo, 8, 2, /*shift=*/true)));
  ASSERT_TRUE(kv.on_computed(id, tokens(12), 12));
  // Block 1 (slots 4..7) dropped: slots 8..11 are now 4..7 in block 2, 4 positions earlier.
  const KvOps expected = {KvOp::rotate_key(0, 8, -4), KvOp::rotate_key(0, 9, -4), KvOp::rotate_key(0, 10, -4),
                          KvOp::rotate_key(0, 11, -4)};
  EXPECT_EQ(kv.take_ops(), expected);
  kv.free(id);
}

TEST(KvEviction, SharedBlocksAreCopiedBeforeTheyChange) {
  KvCacheManager kv = manager(16, true);
  const std::vector<int32_t> t = tokens(13);
  // Request 1 (unbounded) caches blocks 0, 1, 2 of the prompt.
  ASSERT_TRUE(kv.allocate(RequestId(1), 13));
  ASSERT_TRUE(kv.on_computed(RequestId(1), t, 13));
  // Request 2, budget 8 with sinks 2, hits two blocks (at most its budget).
  const KvBudget b = budget(KvPolicyKind::kSinks, 8, 2);
  PrefixHit hit = kv.find_prefix(t, 0, kv.max_hit_tokens(b));
  ASSERT_EQ(hit.num_tokens, 8);
  ASSERT_TRUE(kv.allocate(RequestId(2), kv.max_new_tokens(RequestId(2), b, &hit), &hit, b));
  EXPECT_EQ(kv.table(RequestId(2), 0).blocks(), ids({0, 1, 4}));
  ASSERT_TRUE(kv.on_computed(RequestId(2), t, 12));
  // Block 1 takes the sinks and is shared with request 1 and the prefix
  // cache: it is copied to block 5 first, and the sinks move into the copy.
  const KvOps expected = {KvOp::copy_block(0, 1, 5), KvOp::move_slot(0, 0, 5 * kBs), KvOp::move_slot(0, 1, 5 * kBs + 1)};
  EXPECT_EQ(kv.take_ops(), expected);
  EXPECT_EQ(kv.table(RequestId(2), 0).blocks(), ids({5, 4}));
  EXPECT_EQ(kv.table(RequestId(1), 0).blocks(), ids({0, 1, 2, 3}));
  EXPECT_EQ(kv.pool().meta(BlockId(1)).ref_count, 1);
  EXPECT_TRUE(kv.pool().meta(BlockId(1)).hash.has_value());  // still a valid cache entry
  kv.free(RequestId(1));
  kv.free(RequestId(2));
  EXPECT_EQ(kv.pool().num_free_blocks(), 16);
}

TEST(KvEviction, ACachedBlockHeldAloneIsForgottenWhenNoBlockIsFree) {
  KvCacheManager kv = manager(3, true);
  const RequestId id(1);
  ASSERT_TRUE(kv.allocate(id, 12, nullptr, budget(KvPolicyKind::kSinks, 8, 2)));
  ASSERT_TRUE(kv.on_computed(id, tokens(12), 12));  // published blocks 0, 1, 2, then wrote into 1
  EXPECT_TRUE(kv.pool().meta(BlockId(0)).hash.has_value());  // only read: its entry stays
  EXPECT_FALSE(kv.pool().meta(BlockId(1)).hash.has_value());
  EXPECT_EQ(kv.pool().num_cached_blocks(), 2u);
  kv.free(id);
}

TEST(KvEviction, ASharedBlockWithNoFreeCopyAsksForPreemption) {
  KvCacheManager kv = manager(4, true);
  const std::vector<int32_t> t = tokens(13);
  ASSERT_TRUE(kv.allocate(RequestId(1), 9));
  ASSERT_TRUE(kv.on_computed(RequestId(1), t, 9));  // blocks 0, 1 cached and held; 2 partial
  const KvBudget b = budget(KvPolicyKind::kSinks, 8, 2);
  PrefixHit hit = kv.find_prefix(t, 0, kv.max_hit_tokens(b));
  ASSERT_EQ(hit.num_tokens, 8);
  ASSERT_TRUE(kv.allocate(RequestId(2), 4, &hit, b));  // takes the last free block
  EXPECT_FALSE(kv.on_computed(RequestId(2), t, 12));
  kv.free(RequestId(2));
  kv.free(RequestId(1));
  EXPECT_EQ(kv.pool().num_free_blocks(), 4);
}

TEST(KvEviction, NothingMoreIsPublishedAfterTheFirstDrop) {
  KvCacheManager kv = manager(16, true);
  const RequestId id(1);
  const KvBudget b = budget(KvPolicyKind::kFifo, 8, 2);
  const std::vector<int32_t> t = tokens(20);
  ASSERT_TRUE(kv.allocate(id, 12, nullptr, b));
  ASSERT_TRUE(kv.on_computed(id, t, 12));
  EXPECT_EQ(kv.pool().num_cached_blocks(), 3u);
  ASSERT_TRUE(kv.allocate(id, 4));
  ASSERT_TRUE(kv.on_computed(id, t, 16));
  EXPECT_EQ(kv.pool().num_cached_blocks(), 3u);  // the new full block is not position-aligned
  EXPECT_EQ(kv.find_prefix(t).num_tokens, 12);   // the first 3 blocks still hit
  kv.free(id);
}

TEST(KvEviction, StatisticPoliciesTakeNoPrefixHit) {
  KvCacheManager kv = manager(16, true);
  EXPECT_EQ(kv.max_hit_tokens(budget(KvPolicyKind::kH2o, 8, 0)), 0);
  EXPECT_EQ(kv.max_hit_tokens(budget(KvPolicyKind::kEntropy, 8, 0)), 0);
  EXPECT_EQ(kv.max_hit_tokens(budget(KvPolicyKind::kWindow, 8, 0)), 8);
  EXPECT_EQ(kv.max_hit_tokens(KvBudget{}), INT32_MAX);
}

}  // namespace
}  // namespace kvlm
