// FreeBlockQueue and BlockPool: exact allocation, free and eviction orders.
#include <gtest/gtest.h>

#include <vector>

#include "kv/block_pool.h"
#include "unit/kv/kv_test_helpers.h"

namespace kvlm {
namespace {

using test::ids;

BlockHash hash_of(int32_t token) {
  int32_t tokens[1] = {token};
  return hash_block(std::nullopt, tokens);
}

TEST(FreeBlockQueue, PushRemoveFromMiddlePop) {
  std::vector<BlockMeta> meta(6);
  FreeBlockQueue q(meta);
  EXPECT_EQ(q.size(), 0);
  EXPECT_FALSE(q.head().has_value());
  for (int32_t i = 0; i < 5; ++i) q.push_back(BlockId(i));
  EXPECT_EQ(q.to_vector(), ids({0, 1, 2, 3, 4}));

  q.remove(BlockId(2));  // middle
  EXPECT_EQ(q.to_vector(), ids({0, 1, 3, 4}));
  EXPECT_FALSE(meta[2].in_free_queue);
  EXPECT_FALSE(meta[2].prev_free.has_value());
  EXPECT_FALSE(meta[2].next_free.has_value());

  q.remove(BlockId(0));  // head
  EXPECT_EQ(q.head(), BlockId(1));
  q.remove(BlockId(4));  // tail
  EXPECT_EQ(q.to_vector(), ids({1, 3}));

  q.push_back(BlockId(2));
  q.push_back(BlockId(5));
  EXPECT_EQ(q.to_vector(), ids({1, 3, 2, 5}));
  EXPECT_EQ(q.size(), 4);

  EXPECT_EQ(q.pop_front(), BlockId(1));
  EXPECT_EQ(q.pop_front(), BlockId(3));
  EXPECT_EQ(q.to_vector(), ids({2, 5}));
  q.remove(BlockId(5));
  q.remove(BlockId(2));
  EXPECT_EQ(q.size(), 0);
  EXPECT_FALSE(q.head().has_value());
  q.push_back(BlockId(4));  // an emptied queue works again
  EXPECT_EQ(q.to_vector(), ids({4}));
}

TEST(FreeBlockQueueDeathTest, PushTwiceIsAnInvariantFailure) {
  std::vector<BlockMeta> meta(2);
  FreeBlockQueue q(meta);
  q.push_back(BlockId(1));
  EXPECT_DEATH(q.push_back(BlockId(1)), "pushed twice");
}

TEST(BlockPool, AllocatesInIdOrder) {
  BlockPool pool(5, true);
  EXPECT_EQ(pool.num_free_blocks(), 5);
  EXPECT_EQ(pool.free_queue_order(), ids({0, 1, 2, 3, 4}));
  EXPECT_EQ(pool.allocate(3), ids({0, 1, 2}));
  EXPECT_EQ(pool.allocate(1), ids({3}));
  EXPECT_EQ(pool.num_free_blocks(), 1);
  EXPECT_EQ(pool.num_used_blocks(), 4);
  for (int32_t i = 0; i < 4; ++i) EXPECT_EQ(pool.meta(BlockId(i)).ref_count, 1);
  EXPECT_EQ(pool.meta(BlockId(4)).ref_count, 0);
  EXPECT_TRUE(pool.can_allocate(1));
  EXPECT_FALSE(pool.can_allocate(2));
  EXPECT_TRUE(pool.allocate(0).empty());
}

TEST(BlockPool, FreeOrderIsQueueOrder) {
  BlockPool pool(6, true);
  pool.allocate(4);  // 0..3; queue 4,5
  std::vector<BlockId> last_first = ids({3, 2, 1});
  pool.free(last_first);
  EXPECT_EQ(pool.free_queue_order(), ids({4, 5, 3, 2, 1}));
  EXPECT_EQ(pool.allocate(3), ids({4, 5, 3}));
  std::vector<BlockId> zero = ids({0});
  pool.free(zero);
  EXPECT_EQ(pool.free_queue_order(), ids({2, 1, 0}));
}

TEST(BlockPool, EvictsOldestFreedCachedBlockFirst) {
  BlockPool pool(4, true);
  std::vector<BlockId> all = pool.allocate(4);
  for (int32_t i = 0; i < 4; ++i) pool.cache(BlockId(i), hash_of(100 + i));
  EXPECT_EQ(pool.num_cached_blocks(), 4u);
  for (int32_t i : {1, 3, 0, 2}) {
    std::vector<BlockId> one = ids({i});
    pool.free(one);
  }
  EXPECT_EQ(pool.free_queue_order(), ids({1, 3, 0, 2}));
  // Freed blocks keep their hashes until reused.
  for (int32_t i = 0; i < 4; ++i) EXPECT_EQ(pool.find_cached(hash_of(100 + i)), BlockId(i));

  // The oldest freed block is reused and forgets its hash.
  EXPECT_EQ(pool.allocate(1), ids({1}));
  EXPECT_FALSE(pool.find_cached(hash_of(101)).has_value());
  EXPECT_FALSE(pool.meta(BlockId(1)).hash.has_value());
  EXPECT_EQ(pool.num_cached_blocks(), 3u);

  // A hit on a free cached block takes it out of the middle of the queue.
  std::vector<BlockId> three = ids({3});
  pool.touch(three);
  EXPECT_EQ(pool.free_queue_order(), ids({0, 2}));
  EXPECT_EQ(pool.meta(BlockId(3)).ref_count, 1);
  EXPECT_EQ(pool.find_cached(hash_of(103)), BlockId(3));
  EXPECT_EQ(pool.allocate(1), ids({0}));  // not 3
  EXPECT_EQ(pool.find_cached(hash_of(103)), BlockId(3));

  // Freed again, it goes to the tail: evicted after 2.
  pool.free(three);
  EXPECT_EQ(pool.free_queue_order(), ids({2, 3}));
  EXPECT_EQ(pool.allocate(2), ids({2, 3}));
  EXPECT_EQ(pool.num_cached_blocks(), 0u);
  EXPECT_FALSE(pool.find_cached(hash_of(103)).has_value());
}

TEST(BlockPool, SharedBlocksCountReferences) {
  BlockPool pool(4, true);
  std::vector<BlockId> a = pool.allocate(2);  // request A: 0, 1
  pool.cache(a[0], hash_of(1));
  pool.cache(a[1], hash_of(2));
  // Request B hits both blocks.
  std::vector<BlockId> b = {*pool.find_cached(hash_of(1)), *pool.find_cached(hash_of(2))};
  EXPECT_EQ(b, a);
  pool.touch(b);
  EXPECT_EQ(pool.meta(BlockId(0)).ref_count, 2);
  EXPECT_EQ(pool.meta(BlockId(1)).ref_count, 2);
  EXPECT_EQ(pool.num_free_blocks(), 2);

  std::vector<BlockId> b_rev = ids({1, 0});
  pool.free(b_rev);
  EXPECT_EQ(pool.meta(BlockId(0)).ref_count, 1);
  EXPECT_EQ(pool.meta(BlockId(1)).ref_count, 1);
  EXPECT_EQ(pool.free_queue_order(), ids({2, 3}));

  pool.free(b_rev);  // A ends
  EXPECT_EQ(pool.meta(BlockId(0)).ref_count, 0);
  EXPECT_EQ(pool.free_queue_order(), ids({2, 3, 1, 0}));
  EXPECT_EQ(pool.find_cached(hash_of(1)), BlockId(0));
  EXPECT_EQ(pool.num_free_blocks(), 4);
}

TEST(BlockPool, CacheKeepsFirstBlockPerHash) {
  BlockPool pool(3, true);
  pool.allocate(2);
  pool.cache(BlockId(0), hash_of(7));
  pool.cache(BlockId(1), hash_of(7));  // same content computed twice
  EXPECT_EQ(pool.find_cached(hash_of(7)), BlockId(0));
  EXPECT_FALSE(pool.meta(BlockId(1)).hash.has_value());
  pool.cache(BlockId(0), hash_of(8));  // already has a hash: no-op
  EXPECT_EQ(pool.meta(BlockId(0)).hash, hash_of(7));
  EXPECT_FALSE(pool.find_cached(hash_of(8)).has_value());
  EXPECT_EQ(pool.num_cached_blocks(), 1u);
  // Reusing block 1 (never cached) must not drop block 0's entry.
  std::vector<BlockId> one = ids({1});
  pool.free(one);
  pool.allocate(2);
  EXPECT_EQ(pool.find_cached(hash_of(7)), BlockId(0));
}

TEST(BlockPool, CachingOffCachesNothing) {
  BlockPool pool(2, false);
  EXPECT_FALSE(pool.prefix_caching());
  pool.allocate(1);
  pool.cache(BlockId(0), hash_of(1));
  EXPECT_FALSE(pool.meta(BlockId(0)).hash.has_value());
  EXPECT_FALSE(pool.find_cached(hash_of(1)).has_value());
  EXPECT_EQ(pool.num_cached_blocks(), 0u);
}

TEST(BlockPoolDeathTest, DoubleFreeIsAnInvariantFailure) {
  BlockPool pool(2, true);
  std::vector<BlockId> b = pool.allocate(1);
  pool.free(b);
  EXPECT_DEATH(pool.free(b), "double free");
}

TEST(BlockPoolDeathTest, AllocatingMoreThanFreeIsAnInvariantFailure) {
  BlockPool pool(2, true);
  EXPECT_DEATH(pool.allocate(3), "can_allocate");
}

}  // namespace
}  // namespace kvlm

namespace kvlm {
namespace {

using Kind = KvEvent::Kind;

// KV events (for a router): every hash that enters or leaves the prefix
// cache, in order — cached, reused by allocation, uncached — and nothing for
// a hash that another block already caches, or while recording is off.
TEST(BlockPoolEvents, ListEveryHashInAndOutInOrder) {
  BlockPool pool(2, /*enable_prefix_caching=*/true);
  std::vector<BlockId> a = pool.allocate(2);
  pool.cache(a[0], hash_of(1));  // not recorded yet
  pool.record_events(true);
  pool.cache(a[1], hash_of(2));
  pool.cache(a[1], hash_of(3));  // already has a hash: no-op
  EXPECT_EQ(pool.take_events(), (std::vector<KvEvent>{{Kind::kStored, hash_of(2)}}));
  EXPECT_TRUE(pool.take_events().empty());
  pool.free(a);
  std::vector<BlockId> b = pool.allocate(1);  // reuses a[0]: hash 1 leaves
  std::vector<BlockId> c = pool.allocate(1);  // reuses a[1]: hash 2 leaves
  pool.cache(b[0], hash_of(4));
  pool.cache(c[0], hash_of(4));  // another block caches 4 already
  pool.uncache(b[0]);
  EXPECT_EQ(pool.take_events(), (std::vector<KvEvent>{{Kind::kRemoved, hash_of(1)},
                                                      {Kind::kRemoved, hash_of(2)},
                                                      {Kind::kStored, hash_of(4)},
                                                      {Kind::kRemoved, hash_of(4)}}));
  EXPECT_TRUE(pool.cached_hashes().empty());
  pool.cache(c[0], hash_of(5));
  EXPECT_EQ(pool.cached_hashes(), std::vector<BlockHash>{hash_of(5)});
}

// A flush (SGLang's /flush_cache): refused while a block is in use, then
// every cached hash leaves, in the free queue's order, each a removed event,
// and the queue's order stays (the next allocation takes the same block).
TEST(BlockPoolEvents, ResetForgetsEveryHashOnlyWhenNothingIsInUse) {
  BlockPool pool(3, /*enable_prefix_caching=*/true);
  std::vector<BlockId> a = pool.allocate(3);
  pool.cache(a[0], hash_of(1));
  pool.cache(a[1], hash_of(2));  // a[2] holds no hash
  pool.record_events(true);
  pool.free(std::vector<BlockId>{a[1], a[0]});
  EXPECT_FALSE(pool.reset_prefix_cache()) << "a[2] is in use";
  EXPECT_EQ(pool.num_cached_blocks(), 2u);
  EXPECT_TRUE(pool.take_events().empty());
  pool.free(std::vector<BlockId>{a[2]});
  const std::vector<BlockId> order = pool.free_queue_order();
  ASSERT_TRUE(pool.reset_prefix_cache());
  EXPECT_EQ(pool.num_cached_blocks(), 0u);
  EXPECT_FALSE(pool.find_cached(hash_of(1)));
  EXPECT_EQ(pool.take_events(), (std::vector<KvEvent>{{Kind::kRemoved, hash_of(2)}, {Kind::kRemoved, hash_of(1)}}));
  EXPECT_EQ(pool.free_queue_order(), order);
  EXPECT_EQ(pool.allocate(1)[0], order.front());
}

TEST(BlockHashHex, RoundTripsAndRefusesAnythingElse) {
  const BlockHash h = hash_of(77);
  const std::string hex = block_hash_hex(h);
  EXPECT_EQ(hex.size(), 32u);
  EXPECT_EQ(block_hash_from_hex(hex), h);
  EXPECT_EQ(block_hash_hex(BlockHash{Hash128{0x1, 0xab}}), "00000000000000ab0000000000000001");
  EXPECT_FALSE(block_hash_from_hex(hex.substr(1)));
  EXPECT_FALSE(block_hash_from_hex("0000000000000000000000000000000G"));
  EXPECT_FALSE(block_hash_from_hex("00000000000000AB0000000000000001"));
}

}  // namespace
}  // namespace kvlm
