// Block hashes chain to their parent: a hit on block i means the prefix matches.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "kv/block_hash.h"
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
