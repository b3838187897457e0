// The KV pool's size from the flags (kv/kv_pool_sizing.h).
#include <gtest/gtest.h>

#include "common/error.h"
#include "kv/kv_pool_sizing.h"

namespace kvlm {
namespace {

KvPoolSizing base() {
  KvPoolSizing s;
  s.max_seqs = 4;
  s.memory_budget_bytes = int64_t{1} << 30;
  s.block_size = 16;
  s.block_bytes = 1024;
  s.num_groups = 1;
  s.model_len = 100;
  return s;
}

TEST(KvPoolSizing, BytesWinOverTokens) {
  KvPoolSizing s = base();
  s.kv_mem_bytes = 10 * 1024 + 5;
  s.kv_tokens = 1600;
  const KvPoolSize size = size_kv_pool(s);
  EXPECT_EQ(size.num_blocks, 10);
  EXPECT_EQ(size.pool_tokens, 160);
  EXPECT_EQ(size.max_model_len, 100);
}

TEST(KvPoolSizing, TokensRoundUpToWholeBlocksPerGroup) {
  KvPoolSizing s = base();
  s.kv_tokens = 33;
  s.num_groups = 2;
  const KvPoolSize size = size_kv_pool(s);
  EXPECT_EQ(size.num_blocks, 6);
  EXPECT_EQ(size.pool_tokens, 48);
  EXPECT_EQ(size.max_model_len, 48);  // a request must fit the pool alone
}

TEST(KvPoolSizing, FullContextsWithinTheBudget) {
  KvPoolSizing s = base();
  EXPECT_EQ(size_kv_pool(s).num_blocks, 4 * 7);
  s.memory_budget_bytes = 10 * 1024;  // under max_seqs contexts, never under one
  EXPECT_EQ(size_kv_pool(s).num_blocks, 10);
  s.memory_budget_bytes = 1024;
  EXPECT_EQ(size_kv_pool(s).num_blocks, 7);
}

TEST(KvPoolSizing, RefusesAPoolOfNoBlock) {
  KvPoolSizing s = base();
  s.kv_mem_bytes = 1000;
  EXPECT_THROW(size_kv_pool(s), Error);
}

TEST(KvPoolSizing, DefaultBudgetIsAtMostFourGiB) {
  const int64_t b = default_kv_budget_bytes();
  EXPECT_GT(b, 0);
  EXPECT_LE(b, int64_t{4} << 30);
}

}  // namespace
}  // namespace kvlm
