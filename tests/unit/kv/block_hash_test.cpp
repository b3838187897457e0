// Block hashes chain to their parent: a hit on block i means the prefix matches.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "kv/block_hash.h"
#include "kv/kv_chunks.h"
#include "unit/kv/kv_test_helpers.h"

namespace kvlm {
namespace {

using test::iota_tokens;

TEST(BlockHash, ChainsThroughEveryBlock) {
  std::vector<int32_t> tokens = iota_tokens(64);
  std::vector<BlockHash> base = hash_full_blocks(tokens, 16);
  ASSERT_EQ(base.size(), 4u);
  EXPECT_EQ(hash_full_blocks(tokens, 16), base);  // deterministic

  // A change in block 0 changes every later hash.
  std::vector<int32_t> changed = tokens;
  changed[3] = 999;
  std::vector<BlockHash> h0 = hash_full_blocks(changed, 16);
  for (size_t i = 0; i < 4; ++i) EXPECT_NE(h0[i], base[i]) << "block " << i;

  // A change in block 2 keeps blocks 0 and 1.
  changed = tokens;
  changed[40] = 999;
  std::vector<BlockHash> h2 = hash_full_blocks(changed, 16);
  EXPECT_EQ(h2[0], base[0]);
  EXPECT_EQ(h2[1], base[1]);
  EXPECT_NE(h2[2], base[2]);
  EXPECT_NE(h2[3], base[3]);
}

TEST(BlockHash, FullBlocksMatchManualChain) {
  std::vector<int32_t> tokens = iota_tokens(40, 5);  // 2 full blocks of 16, 8 left over
  std::vector<BlockHash> h = hash_full_blocks(tokens, 16, 42);
  ASSERT_EQ(h.size(), 2u);
  std::span<const int32_t> s(tokens);
  BlockHash b0 = hash_block(std::nullopt, s.subspan(0, 16), 42);
  BlockHash b1 = hash_block(b0, s.subspan(16, 16), 42);
  EXPECT_EQ(h[0], b0);
  EXPECT_EQ(h[1], b1);
  // The partial tail does not matter.
  EXPECT_EQ(hash_full_blocks(s.subspan(0, 32), 16, 42), h);
  EXPECT_TRUE(hash_full_blocks(s.subspan(0, 15), 16).empty());
}

TEST(BlockHash, SameTokensDifferentParentDiffer) {
  std::vector<int32_t> a = iota_tokens(16);
  std::vector<int32_t> b = iota_tokens(16, 100);
  BlockHash pa = hash_block(std::nullopt, a);
  BlockHash pb = hash_block(std::nullopt, b);
  std::vector<int32_t> block = iota_tokens(16, 1000);
  EXPECT_NE(hash_block(pa, block), hash_block(pb, block));
  EXPECT_NE(hash_block(pa, block), hash_block(std::nullopt, block));
  EXPECT_EQ(hash_block(pa, block), hash_block(pa, block));
}

TEST(BlockHash, ExtraKeySeparates) {
  std::vector<int32_t> tokens = iota_tokens(32);
  std::vector<BlockHash> none = hash_full_blocks(tokens, 16);
  std::vector<BlockHash> salt1 = hash_full_blocks(tokens, 16, 1);
  std::vector<BlockHash> salt2 = hash_full_blocks(tokens, 16, 2);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_NE(none[i], salt1[i]);
    EXPECT_NE(salt1[i], salt2[i]);
  }
  EXPECT_EQ(hash_full_blocks(tokens, 16, 0), none);  // 0 means no key
}

TEST(BlockHash, TokenOrderAndValueMatter) {
  std::vector<int32_t> a = {1, 2, 3, 4};
  std::vector<int32_t> b = {2, 1, 3, 4};
  std::vector<int32_t> c = {1, 2, 3, 5};
  EXPECT_NE(hash_block(std::nullopt, a), hash_block(std::nullopt, b));
  EXPECT_NE(hash_block(std::nullopt, a), hash_block(std::nullopt, c));
}

}  // namespace
}  // namespace kvlm

namespace kvlm {
namespace {

TEST(KvChunkKey, ChunkBlocksAreKeyedApartFromPrefixBlocksAndFromEachOther) {
  const Hash128 adapter{0x1234, 0x5678};
  const std::vector<uint64_t> keys = {0, cache_salt_key("a"), cache_salt_key("b"), adapter_extra_key(adapter, 0),
                                      adapter_extra_key(adapter, cache_salt_key("a"))};
  std::vector<uint64_t> chunk_keys;
  for (uint64_t k : keys) {
    const uint64_t c = kv_chunk_extra_key(k);
    EXPECT_NE(c, 0u);
    EXPECT_NE(c, k);
    for (uint64_t other : keys) EXPECT_NE(c, other);
    for (uint64_t other : chunk_keys) EXPECT_NE(c, other);
    chunk_keys.push_back(c);
  }
}

TEST(KvChunkPrompt, PrefixThenTheChunkCutToWholeBlocks) {
  const std::vector<int32_t> bos = {1}, chunk = {5, 6, 7, 8, 9, 10, 11};
  EXPECT_EQ(kv_chunk_prompt(bos, chunk, 4), (std::vector<int32_t>{1, 5, 6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(kv_chunk_prompt(bos, std::span<const int32_t>(chunk).first(5), 4), (std::vector<int32_t>{1, 5, 6, 7}));
  EXPECT_TRUE(kv_chunk_prompt(bos, std::span<const int32_t>(chunk).first(2), 4).empty());
  EXPECT_EQ(kv_chunk_prompt({}, chunk, 4), (std::vector<int32_t>{5, 6, 7, 8}));
}

TEST(KvChunkSelection, RecomputesTheMostDeviatingShareOfReusedTokens) {
  BlendPlan plan;
  plan.begin = 10;
  plan.reused = {0, 1, 1, 1, 1, 0};
  plan.compute = {1, 0, 0, 0, 0, 1};
  plan.deviation = {9, 0.5f, 3, 0.5f, 2, 9};
  BlendPlan half = plan;
  select_recompute(half, 0.5);
  EXPECT_EQ(half.compute, (std::vector<uint8_t>{1, 0, 1, 0, 1, 1}));
  EXPECT_EQ(half.num_recomputed, 2);
  BlendPlan some = plan;
  select_recompute(some, 0.3);  // ceil(1.2) = 2
  EXPECT_EQ(some.num_recomputed, 2);
  BlendPlan ties = plan;
  ties.deviation = {0, 1, 1, 1, 1, 0};
  select_recompute(ties, 0.25);  // equal deviations: the earliest
  EXPECT_EQ(ties.compute, (std::vector<uint8_t>{1, 1, 0, 0, 0, 1}));
  BlendPlan none = plan, all = plan;
  select_recompute(none, 0);
  EXPECT_EQ(none.compute, plan.compute);
  select_recompute(all, 1);
  EXPECT_EQ(all.compute, (std::vector<uint8_t>{1, 1, 1, 1, 1, 1}));
}

}  // namespace
}  // namespace kvlm
