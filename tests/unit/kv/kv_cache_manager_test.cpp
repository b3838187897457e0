// KvCacheManager: prefix hits, allocate/free round trips, window release.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "common/error.h"
#include "kv/kv_cache_manager.h"
#include "unit/kv/kv_test_helpers.h"

namespace kvlm {
namespace {

using test::iota_tokens;
using test::ids;

KvCacheConfig config(int32_t num_blocks, int32_t block_size, bool caching = true,
                     std::vector<int32_t> windows = {0}) {
  KvCacheConfig c;
  c.num_blocks = num_blocks;
  c.block_size = block_size;
  c.enable_prefix_caching = caching;
  c.group_windows = std::move(windows);
  return c;
}

// Computes a whole prompt in one step, as a scheduler would.
void compute(KvCacheManager& kv, RequestId id, const std::vector<int32_t>& tokens,
             const PrefixHit* hit = nullptr) {
  int32_t start = hit ? hit->num_tokens : 0;
  ASSERT_TRUE(kv.allocate(id, static_cast<int32_t>(tokens.size()) - start, hit));
  ASSERT_TRUE(kv.on_computed(id, tokens, static_cast<int32_t>(tokens.size())));
}

TEST(KvCacheManager, PrefixHitCountsFullBlocksLeavingOneToken) {
  KvCacheManager kv(config(32, 4));
  std::vector<int32_t> a = iota_tokens(10);
  compute(kv, RequestId(1), a);
  EXPECT_EQ(kv.table(RequestId(1), 0).blocks(), ids({0, 1, 2}));
  EXPECT_EQ(kv.pool().num_cached_blocks(), 2u);  // the partial block is not cached

  PrefixHit same = kv.find_prefix(a);
  EXPECT_EQ(same.num_tokens, 8);
  EXPECT_EQ(same.tables[0].blocks(), ids({0, 1}));

  std::vector<int32_t> diverge = iota_tokens(10);
  diverge[6] = 77;  // inside block 1
  PrefixHit one = kv.find_prefix(diverge);
  EXPECT_EQ(one.num_tokens, 4);
  EXPECT_EQ(one.tables[0].blocks(), ids({0}));

  // Fully cached in full blocks: the last block is dropped to leave a token.
  PrefixHit exact = kv.find_prefix(iota_tokens(8));
  EXPECT_EQ(exact.num_tokens, 4);
  EXPECT_EQ(kv.find_prefix(iota_tokens(9)).num_tokens, 8);
  EXPECT_EQ(kv.find_prefix(iota_tokens(4)).num_tokens, 0);
  EXPECT_EQ(kv.find_prefix(iota_tokens(3)).num_tokens, 0);

  // Another salt, or other first tokens: nothing.
  EXPECT_EQ(kv.find_prefix(a, 5).num_tokens, 0);
  EXPECT_EQ(kv.find_prefix(iota_tokens(10, 1)).num_tokens, 0);

  // Lookups count only when a request is admitted with them.
  EXPECT_EQ(kv.num_prefix_query_tokens(), 0);
  EXPECT_EQ(kv.num_prefix_hit_tokens(), 0);
  EXPECT_EQ(same.num_query_tokens, 10);
  ASSERT_TRUE(kv.allocate(RequestId(2), 2, &same));
  ASSERT_TRUE(kv.allocate(RequestId(3), 6, &one));
  EXPECT_EQ(kv.num_prefix_query_tokens(), 20);
  EXPECT_EQ(kv.num_prefix_hit_tokens(), 12);
  kv.free(RequestId(1));
  kv.free(RequestId(2));
  kv.free(RequestId(3));
  EXPECT_EQ(kv.pool().num_free_blocks(), 32);
}

TEST(KvCacheManager, SaltedRequestsShareOnlyWithinSalt) {
  KvCacheManager kv(config(8, 4));
  std::vector<int32_t> t = iota_tokens(9);
  ASSERT_TRUE(kv.allocate(RequestId(1), 9));
  ASSERT_TRUE(kv.on_computed(RequestId(1), t, 9, /*extra_key=*/7));
  EXPECT_EQ(kv.find_prefix(t).num_tokens, 0);
  EXPECT_EQ(kv.find_prefix(t, 7).num_tokens, 8);
  kv.free(RequestId(1));
}

TEST(KvCacheManager, HitTakesReferencesAndFreeRoundTrips) {
  KvCacheManager kv(config(8, 4));
  std::vector<int32_t> t = iota_tokens(10);
  compute(kv, RequestId(1), t);  // blocks 0,1,2
  PrefixHit hit = kv.find_prefix(t);
  ASSERT_EQ(hit.num_tokens, 8);
  compute(kv, RequestId(2), t, &hit);
  EXPECT_EQ(kv.table(RequestId(2), 0).blocks(), ids({0, 1, 3}));
  EXPECT_EQ(kv.pool().meta(BlockId(0)).ref_count, 2);
  EXPECT_EQ(kv.pool().meta(BlockId(1)).ref_count, 2);
  EXPECT_EQ(kv.pool().meta(BlockId(2)).ref_count, 1);
  EXPECT_EQ(kv.pool().num_free_blocks(), 4);

  kv.free(RequestId(2));  // last block first
  EXPECT_FALSE(kv.has_request(RequestId(2)));
  EXPECT_EQ(kv.pool().meta(BlockId(0)).ref_count, 1);
  EXPECT_EQ(kv.pool().free_queue_order(), ids({4, 5, 6, 7, 3}));
  kv.free(RequestId(1));
  EXPECT_EQ(kv.pool().free_queue_order(), ids({4, 5, 6, 7, 3, 2, 1, 0}));
  EXPECT_EQ(kv.pool().num_free_blocks(), 8);
  kv.free(RequestId(1));  // unknown now: a no-op
  EXPECT_EQ(kv.pool().num_free_blocks(), 8);
  // The cached blocks are still hits, found in the free queue.
  EXPECT_EQ(kv.find_prefix(t).tables[0].blocks(), ids({0, 1}));
}

TEST(KvCacheManager, GrowsTableAcrossSteps) {
  KvCacheManager kv(config(8, 4, /*caching=*/false));
  std::vector<int32_t> t = iota_tokens(9);
  RequestId id(3);
  ASSERT_TRUE(kv.allocate(id, 5));  // slots 0..4
  EXPECT_EQ(kv.table(id, 0).blocks(), ids({0, 1}));
  ASSERT_TRUE(kv.on_computed(id, t, 5));
  ASSERT_TRUE(kv.allocate(id, 1));  // slot 5: same block
  EXPECT_EQ(kv.table(id, 0).blocks().size(), 2u);
  ASSERT_TRUE(kv.on_computed(id, t, 6));
  ASSERT_TRUE(kv.allocate(id, 3));  // slots 6..8
  EXPECT_EQ(kv.table(id, 0).blocks(), ids({0, 1, 2}));
  ASSERT_TRUE(kv.on_computed(id, t, 9));
  EXPECT_EQ(kv.pool().num_cached_blocks(), 0u);  // caching off
  EXPECT_EQ(kv.find_prefix(t).num_tokens, 0);
  EXPECT_EQ(kv.num_prefix_query_tokens(), 0);
  kv.free(id);
  EXPECT_EQ(kv.pool().free_queue_order(), ids({3, 4, 5, 6, 7, 2, 1, 0}));
}

TEST(KvCacheManager, ShortPoolChangesNothing) {
  KvCacheManager kv(config(4, 4));
  std::vector<int32_t> t = iota_tokens(12);
  compute(kv, RequestId(1), t);  // 3 blocks, 1 free
  std::vector<BlockId> queue = kv.pool().free_queue_order();
  EXPECT_FALSE(kv.can_allocate(RequestId(2), 8));
  EXPECT_FALSE(kv.allocate(RequestId(2), 8));
  EXPECT_FALSE(kv.has_request(RequestId(2)));
  EXPECT_FALSE(kv.can_allocate(RequestId(1), 8));  // 20 tokens: 2 more blocks
  EXPECT_FALSE(kv.allocate(RequestId(1), 8));
  EXPECT_EQ(kv.table(RequestId(1), 0).blocks().size(), 3u);
  EXPECT_EQ(kv.pool().free_queue_order(), queue);
  EXPECT_TRUE(kv.allocate(RequestId(1), 4));  // 16 tokens: exactly the last block
  EXPECT_EQ(kv.pool().num_free_blocks(), 0);
  kv.free(RequestId(1));
  EXPECT_EQ(kv.pool().num_free_blocks(), 4);
}

// Hit blocks that sit in the free queue leave it when touched: they cannot
// also serve as the request's new blocks.
TEST(KvCacheManager, FreeHitBlocksCountAgainstThePool) {
  KvCacheManager kv(config(3, 4));
  std::vector<int32_t> t = iota_tokens(10);
  compute(kv, RequestId(1), t);  // blocks 0,1,2; 0,1 cached
  kv.free(RequestId(1));         // queue 2,1,0
  ASSERT_TRUE(kv.allocate(RequestId(2), 4));  // takes block 2
  EXPECT_EQ(kv.pool().free_queue_order(), ids({1, 0}));

  PrefixHit hit = kv.find_prefix(t);
  ASSERT_EQ(hit.tables[0].blocks(), ids({0, 1}));
  // 2 tokens to compute need 1 new block, but the only free ones are the hits.
  EXPECT_FALSE(kv.can_allocate(RequestId(3), 2, &hit));
  EXPECT_FALSE(kv.allocate(RequestId(3), 2, &hit));
  EXPECT_FALSE(kv.has_request(RequestId(3)));
  EXPECT_EQ(kv.num_prefix_query_tokens(), 0);  // not admitted: not counted
  EXPECT_EQ(kv.pool().free_queue_order(), ids({1, 0}));
  EXPECT_EQ(kv.pool().meta(BlockId(0)).ref_count, 0);
  EXPECT_EQ(kv.pool().num_cached_blocks(), 2u);

  kv.free(RequestId(2));  // queue 1,0,2
  EXPECT_TRUE(kv.can_allocate(RequestId(3), 2, &hit));
  ASSERT_TRUE(kv.allocate(RequestId(3), 2, &hit));
  EXPECT_EQ(kv.table(RequestId(3), 0).blocks(), ids({0, 1, 2}));
  EXPECT_EQ(kv.pool().num_free_blocks(), 0);
  EXPECT_EQ(kv.num_prefix_query_tokens(), 10);
  EXPECT_EQ(kv.num_prefix_hit_tokens(), 8);
  EXPECT_EQ(kv.pool().meta(BlockId(0)).ref_count, 1);
  kv.free(RequestId(3));
  EXPECT_EQ(kv.pool().free_queue_order(), ids({2, 1, 0}));
}

TEST(KvCacheManager, PublishedHashesChainFromHits) {
  KvCacheManager kv(config(16, 4));
  std::vector<int32_t> t = iota_tokens(6);
  compute(kv, RequestId(1), t);  // block 0 cached
  std::vector<int32_t> longer = iota_tokens(13);
  PrefixHit hit = kv.find_prefix(longer);
  ASSERT_EQ(hit.num_tokens, 4);
  compute(kv, RequestId(2), longer, &hit);  // publishes blocks 1, 2 of `longer`
  EXPECT_EQ(kv.find_prefix(longer).num_tokens, 12);
  std::vector<BlockHash> expected = hash_full_blocks(longer, 4);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(kv.pool().meta(kv.table(RequestId(2), 0).blocks()[i]).hash, expected[i]);
  }
  kv.free(RequestId(1));
  kv.free(RequestId(2));
  EXPECT_EQ(kv.pool().num_free_blocks(), 16);
}

// With contents, each stored event says what its block holds: its parent's
// hash, its tokens, the salt; without them (the HTTP stream's case) nothing
// is copied.
TEST(KvCacheManager, StoredEventsCarryTheirBlocksContents) {
  KvCacheManager kv(config(16, 4));
  kv.record_kv_events(true, /*with_contents=*/true);
  const std::vector<int32_t> tokens = iota_tokens(9);
  ASSERT_TRUE(kv.allocate(RequestId(1), 9));
  ASSERT_TRUE(kv.on_computed(RequestId(1), tokens, 9, /*extra_key=*/7));
  const std::vector<BlockHash> want = hash_full_blocks(tokens, 4, 7);
  const std::vector<KvEvent> events = kv.take_kv_events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].hash, want[0]);
  EXPECT_EQ(events[0].parent, std::nullopt);
  EXPECT_EQ(events[0].tokens, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(events[0].salt, 7u);
  EXPECT_EQ(events[1].hash, want[1]);
  EXPECT_EQ(events[1].parent, want[0]);
  EXPECT_EQ(events[1].tokens, (std::vector<int32_t>{4, 5, 6, 7}));

  KvCacheManager plain(config(16, 4));
  plain.record_kv_events(true);
  ASSERT_TRUE(plain.allocate(RequestId(1), 9));
  ASSERT_TRUE(plain.on_computed(RequestId(1), tokens, 9));
  for (const KvEvent& e : plain.take_kv_events()) {
    EXPECT_FALSE(e.parent.has_value());
    EXPECT_TRUE(e.tokens.empty());
  }
}

// A tier import's blocks carry the contents the tier's records gave.
TEST(KvCacheManager, ImportedBlocksCarryTheGivenContents) {
  KvCacheManager kv(config(8, 4));
  kv.record_kv_events(true, /*with_contents=*/true);
  const std::vector<int32_t> tokens = iota_tokens(8);
  const std::vector<BlockHash> hashes = hash_full_blocks(tokens, 4);
  const std::vector<BlockContent> contents = {{std::nullopt, std::span(tokens).first(4), 0},
                                              {hashes[0], std::span(tokens).subspan(4), 0}};
  auto blocks = kv.import_blocks(hashes, contents);
  ASSERT_TRUE(blocks.has_value());
  kv.release_imported(*blocks);
  const std::vector<KvEvent> events = kv.take_kv_events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].parent, hashes[0]);
  EXPECT_EQ(events[1].tokens, (std::vector<int32_t>{4, 5, 6, 7}));
}

TEST(KvCacheManager, WindowGroupReleasesBlocksOutOfSight) {
  // Block size 4, window 8: a query at slot s sees (s-8, s].
  KvCacheManager kv(config(64, 4, /*caching=*/true, {0, 8}));
  EXPECT_EQ(kv.num_groups(), 2);
  EXPECT_TRUE(kv.prefix_caching());
  EXPECT_EQ(kv.num_blocks_for(10), 6);

  RequestId id(1);
  std::vector<int32_t> t = iota_tokens(64);
  ASSERT_TRUE(kv.allocate(id, 10));
  ASSERT_TRUE(kv.on_computed(id, t, 10));
  // Next query at slot 10 sees 3..10: slots 0..2 are dead, no whole block yet.
  EXPECT_EQ(kv.table(id, 1).num_released, 0);
  for (int32_t n = 11; n <= 40; ++n) {
    ASSERT_TRUE(kv.allocate(id, 1));
    ASSERT_TRUE(kv.on_computed(id, t, n));
    int32_t expect = std::max(0, (n - 8 + 1) / 4);
    ASSERT_EQ(kv.table(id, 1).num_released, expect) << "after " << n << " tokens";
  }
  // After 40 tokens: the next query (slot 40) sees 33..40; blocks 0..7 (slots
  // 0..31) are gone, blocks 8, 9 (slots 32..39) remain.
  EXPECT_EQ(kv.table(id, 1).num_released, 8);
  EXPECT_EQ(kv.table(id, 1).blocks().size(), 10u);
  EXPECT_EQ(kv.table(id, 0).num_released, 0);
  EXPECT_EQ(kv.table(id, 0).blocks().size(), 10u);
  EXPECT_EQ(kv.pool().num_used_blocks(), 12);

  ASSERT_TRUE(kv.allocate(id, 1));  // slot 40 opens block 10 in both groups
  EXPECT_EQ(kv.pool().num_used_blocks(), 14);
  ASSERT_TRUE(kv.on_computed(id, t, 41));  // (41-7)/4 = 8: nothing more to release
  EXPECT_EQ(kv.table(id, 1).num_released, 8);
  ASSERT_TRUE(kv.allocate(id, 1));
  ASSERT_TRUE(kv.on_computed(id, t, 42));  // 35/4 = 8
  ASSERT_TRUE(kv.allocate(id, 1));
  ASSERT_TRUE(kv.on_computed(id, t, 43));  // 36/4 = 9: slots 32..35 fell out
  EXPECT_EQ(kv.table(id, 1).num_released, 9);
  EXPECT_EQ(kv.pool().num_used_blocks(), 11 + 2);
  // 10 full blocks are cached in the full group; the window group holds (or
  // still caches) the two a query at slot 40 sees.
  PrefixHit hit = kv.find_prefix(t);
  EXPECT_EQ(hit.num_tokens, 40);
  EXPECT_EQ(hit.tables[1].num_released, 8);
  EXPECT_EQ(hit.tables[1].blocks()[9], kv.table(id, 1).blocks()[9]);

  kv.free(id);
  EXPECT_EQ(kv.pool().num_free_blocks(), 64);
}

TEST(KvCacheManager, WindowReleaseOrderAndBigChunks) {
  // One window group of 4 with block size 2; a 10-token prompt in one step.
  KvCacheManager kv(config(8, 2, /*caching=*/true, {4}));
  EXPECT_TRUE(kv.prefix_caching());
  RequestId id(1);
  std::vector<int32_t> t = iota_tokens(12);
  ASSERT_TRUE(kv.allocate(id, 10));  // every written slot needs a block
  EXPECT_EQ(kv.table(id, 0).blocks(), ids({0, 1, 2, 3, 4}));
  ASSERT_TRUE(kv.on_computed(id, t, 10));  // next query at 10 sees 7..10: blocks 0..2 dead
  EXPECT_EQ(kv.table(id, 0).num_released, 3);
  EXPECT_EQ(kv.pool().free_queue_order(), ids({5, 6, 7, 0, 1, 2}));
  ASSERT_TRUE(kv.allocate(id, 1));
  EXPECT_EQ(kv.table(id, 0).blocks(), ids({0, 1, 2, 3, 4, 5}));
  ASSERT_TRUE(kv.on_computed(id, t, 11));  // (11-3)/2 = 4
  EXPECT_EQ(kv.table(id, 0).num_released, 4);
  kv.free(id);  // only the live blocks, last first
  EXPECT_EQ(kv.pool().free_queue_order(), ids({6, 7, 0, 1, 2, 3, 5, 4}));
}

// A model with full and sliding-window layers (Gemma-2): a hit needs every
// block in the full group but only the window's blocks in the window group,
// whose older entries start out released.
TEST(KvCacheManager, HybridHitTakesOnlyTheWindowsBlocks) {
  KvCacheManager kv(config(64, 4, /*caching=*/true, {0, 8}));
  std::vector<int32_t> t = iota_tokens(40);
  std::vector<int32_t> prompt(t.begin(), t.begin() + 30);
  compute(kv, RequestId(1), prompt);  // 7 full blocks published in both groups, window blocks 0..4 released
  const BlockTable full = kv.table(RequestId(1), 0);
  const BlockTable window = kv.table(RequestId(1), 1);
  EXPECT_EQ(window.num_released, 5);
  kv.free(RequestId(1));
  EXPECT_EQ(kv.pool().num_free_blocks(), 64);

  PrefixHit hit = kv.find_prefix(t);
  ASSERT_EQ(hit.num_tokens, 28);  // the full group's 7 cached blocks
  ASSERT_EQ(hit.tables.size(), 2u);
  EXPECT_EQ(hit.tables[0].num_released, 0);
  EXPECT_EQ(hit.tables[0].blocks(), std::vector<BlockId>(full.blocks().begin(), full.blocks().begin() + 7));
  // A query at slot 28 sees 21..28: window blocks 5 and 6 from the cache, 0..4 released.
  EXPECT_EQ(hit.tables[1].num_released, 5);
  ASSERT_EQ(hit.tables[1].blocks().size(), 7u);
  EXPECT_EQ(hit.tables[1].blocks()[5], window.blocks()[5]);
  EXPECT_EQ(hit.tables[1].blocks()[6], window.blocks()[6]);

  // 12 new tokens: 3 new blocks per group on top of the 7 + 2 hit blocks.
  compute(kv, RequestId(2), t, &hit);
  EXPECT_EQ(kv.num_prefix_hit_tokens(), 28);
  EXPECT_EQ(kv.table(RequestId(2), 0).blocks().size(), 10u);
  EXPECT_EQ(kv.table(RequestId(2), 1).num_released, 8);  // (40 - 7) / 4
  EXPECT_EQ(kv.pool().num_used_blocks(), 10 + 2);
  kv.free(RequestId(2));
  EXPECT_EQ(kv.pool().num_free_blocks(), 64);

}

TEST(KvCacheManager, RejectsBadConfig) {
  EXPECT_THROW(KvCacheManager(config(0, 4)), Error);
  EXPECT_THROW(KvCacheManager(config(4, 0)), Error);
  EXPECT_THROW(KvCacheManager(config(4, 4, true, {})), Error);
  EXPECT_THROW(KvCacheManager(config(4, 4, true, {0, -1})), Error);
  try {
    KvCacheManager kv(config(-3, 4));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace kvlm
