// The router's view of a worker's blocks: snapshots, numbered batches (a
// gap is refused), leading-block counts; the shared tier's blocks with
// their TTL and cap.
#include <gtest/gtest.h>

#include "router/kv_index.h"

namespace kvlm::router {
namespace {

std::vector<BlockHash> chain(int n, uint64_t salt = 0) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < n * 4; ++i) tokens.push_back(i);
  return hash_full_blocks(tokens, 4, salt);
}

TEST(WorkerKvIndex, CountsTheLeadingBlocksItHolds) {
  const auto c = chain(5);
  WorkerKvIndex idx;
  EXPECT_EQ(idx.num_leading(c), 0);
  EXPECT_FALSE(idx.apply(1, std::vector<BlockHash>{c[0]}, {})) << "no snapshot yet";
  idx.reset({c[0], c[1], c[3]}, 7);
  EXPECT_EQ(idx.num_leading(c), 2) << "block 2 is missing: 3 does not count";
  EXPECT_TRUE(idx.apply(8, std::vector<BlockHash>{c[2]}, {}));
  EXPECT_EQ(idx.num_leading(c), 4);
  EXPECT_FALSE(idx.apply(10, {}, std::vector<BlockHash>{c[0]})) << "batch 9 is missing";
  EXPECT_EQ(idx.num_leading(c), 4) << "a refused batch changes nothing";
  EXPECT_TRUE(idx.apply(9, {}, std::vector<BlockHash>{c[0]}));
  EXPECT_EQ(idx.num_leading(c), 0);
  EXPECT_EQ(idx.num_leading(chain(5, 99)), 0) << "another salt, other hashes";
}

TEST(SharedTierIndex, BlocksExpireAndTheCapHolds) {
  const auto c = chain(4);
  using Clock = SharedTierIndex::Clock;
  const auto t0 = Clock::now();
  SharedTierIndex tier(3);
  tier.add("ns", std::vector<BlockHash>{c[0], c[1]}, std::chrono::seconds(10), t0);
  EXPECT_EQ(tier.num_following("ns", c, 0, t0), 2);
  EXPECT_EQ(tier.num_following("ns", c, 1, t0), 1);
  EXPECT_EQ(tier.num_following("other", c, 0, t0), 0);
  EXPECT_EQ(tier.num_following("ns", c, 0, t0 + std::chrono::seconds(11)), 0) << "past the TTL";
  tier.add("ns", std::vector<BlockHash>{c[2], c[3]}, std::chrono::seconds(10), t0);
  EXPECT_EQ(tier.size(), 3u) << "the oldest left for the cap";
  EXPECT_EQ(tier.num_following("ns", c, 0, t0), 0);
  EXPECT_EQ(tier.num_following("ns", c, 1, t0), 3);
}

}  // namespace
}  // namespace kvlm::router
