// KvPrefaulter: the pool's pages through a lookahead past the highest block in
// use are resident (mincore) before a step writes them, pages past that are
// not, the bytes already there are left alone, and a refusal stops it quietly.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "common/huge_pages.h"
#include "model/model.h"
#include "runner/kv_prefault.h"
#include "runner/kv_storage.h"
#include "support/test_support.h"

namespace kvlm {
namespace {

constexpr size_t kBlockBytes = 8192;
constexpr int32_t kNumBlocks = 1024;  // 8 MiB a region
constexpr size_t kRegions = 3;
constexpr size_t kRegionBytes = kBlockBytes * kNumBlocks;

// The residency of each page that [p, p + bytes) touches.
std::vector<unsigned char> residency(const uint8_t* p, size_t bytes) {
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t lo = reinterpret_cast<uintptr_t>(p) / page * page;
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(p) + bytes + page - 1) / page * page;
  std::vector<unsigned char> vec((hi - lo) / page);
  EXPECT_EQ(::mincore(reinterpret_cast<void*>(lo), hi - lo, vec.data()), 0) << std::strerror(errno);
  return vec;
}
bool all_resident(const uint8_t* p, size_t bytes) {
  for (unsigned char v : residency(p, bytes))
    if ((v & 1) == 0) return false;
  return true;
}
bool none_resident(const uint8_t* p, size_t bytes) {
  for (unsigned char v : residency(p, bytes))
    if ((v & 1) != 0) return false;
  return true;
}

// A pool on 4 KiB pages, so that residency is exact to the page.
HugePageBuffer small_page_pool() { return HugePageBuffer(kRegions * kRegionBytes, "test pool", PageAdvice::kSmall); }

// Blocks [0, n) of every region resident, and none past them.
void expect_resident_through(const HugePageBuffer& pool, int32_t n) {
  for (size_t r = 0; r < kRegions; ++r) {
    const uint8_t* region = pool.data() + r * kRegionBytes;
    EXPECT_TRUE(all_resident(region, n * kBlockBytes)) << "region " << r << ", " << n << " blocks";
    EXPECT_TRUE(none_resident(region + n * kBlockBytes, (kNumBlocks - n) * kBlockBytes)) << "region " << r;
  }
}

TEST(KvPrefaulter, CommitsTheLookaheadOfEveryRegionAndNoMore) {
  HugePageBuffer pool = small_page_pool();
  KvPrefaulter pf(pool.data(), kRegions, kBlockBytes, kNumBlocks);
  EXPECT_EQ(pf.lookahead_blocks(), static_cast<int32_t>(kHugePageBytes / kBlockBytes));  // one 2 MiB page
  const int32_t ahead = pf.lookahead_blocks();
  pf.wait_committed(ahead);
  ASSERT_EQ(pf.committed_blocks(), ahead);
  expect_resident_through(pool, ahead);

  // Within half a lookahead of the committed end nothing happens; past it,
  // blocks through the block in use + the lookahead follow, in every region.
  pf.note_use(ahead / 2 - 1);
  EXPECT_EQ(pf.target_blocks(), ahead);
  pf.note_use(ahead / 2);
  EXPECT_EQ(pf.target_blocks(), ahead / 2 + 1 + ahead);
  pf.note_use(300);
  const int32_t want = 301 + ahead;
  EXPECT_EQ(pf.target_blocks(), want);
  pf.wait_committed(want);
  ASSERT_EQ(pf.committed_blocks(), want);
  expect_resident_through(pool, want);

  // A lower block changes nothing; the pool's end bounds the lookahead.
  pf.note_use(10);
  EXPECT_EQ(pf.target_blocks(), want);
  pf.note_use(kNumBlocks - 1);
  pf.wait_committed(kNumBlocks);
  EXPECT_EQ(pf.committed_blocks(), kNumBlocks);
  EXPECT_TRUE(all_resident(pool.data(), kRegions * kRegionBytes));
}

TEST(KvPrefaulter, LeavesTheBytesOfBlocksInUseAlone) {
  HugePageBuffer pool = small_page_pool();
  KvPrefaulter pf(pool.data(), kRegions, kBlockBytes, kNumBlocks);
  pf.wait_committed(pf.lookahead_blocks());
  // The step thread writes blocks past the committed ones (as it would before
  // the prefaulter catches up) while the prefaulter commits them.
  const int32_t first = pf.lookahead_blocks();
  const int32_t last = first + 200;
  for (size_t r = 0; r < kRegions; ++r)
    std::memset(pool.data() + r * kRegionBytes + first * kBlockBytes, 0x5A, (last - first) * kBlockBytes);
  pf.note_use(last);
  pf.wait_committed(last + 1 + pf.lookahead_blocks());
  for (size_t r = 0; r < kRegions; ++r) {
    const uint8_t* at = pool.data() + r * kRegionBytes;
    for (size_t i = first * kBlockBytes; i < last * kBlockBytes; i += 997) ASSERT_EQ(at[i], 0x5A) << "region " << r;
    EXPECT_EQ(at[last * kBlockBytes], 0);  // committed pages read as zero
  }
}

TEST(KvPrefaulter, StopsQuietlyWhereTheKernelRefuses) {
  // Memory that cannot be written: MADV_POPULATE_WRITE fails on it.
  void* p = ::mmap(nullptr, kRegionBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  {
    KvPrefaulter pf(static_cast<uint8_t*>(p), 1, kBlockBytes, kNumBlocks);
    pf.wait_committed(pf.lookahead_blocks());  // returns: prefaulting has stopped
    EXPECT_EQ(pf.committed_blocks(), 0);
    pf.note_use(500);  // a no-op now
    pf.wait_committed(kNumBlocks);
    EXPECT_EQ(pf.committed_blocks(), 0);
  }
  ::munmap(p, kRegionBytes);
}

TEST(KvPrefaulter, KvStorageCommitsItsFirstLookaheadBeforeUse) {
  auto model = Model::load(test::shared_path("models/stories260K.gguf"));
  KvStorage kv(*model, DType::kF16, /*block_size=*/16, /*num_blocks=*/4096);
  const KvPrefaulter& pf = kv.prefaulter();
  EXPECT_GE(pf.committed_blocks(), pf.lookahead_blocks());  // no wait: the constructor did
  kv.note_use(BlockId(3000));
  pf.wait_committed(4096);
  EXPECT_EQ(pf.committed_blocks(), 4096);
  // Every layer's K and V of the last block are resident.
  const KvCacheView& v = kv.view();
  const size_t bb = v.layout.block_bytes();
  for (const KvLayer& layer : v.layers) {
    EXPECT_TRUE(all_resident(layer.k + 4095 * bb, bb));
    EXPECT_TRUE(all_resident(layer.v + 4095 * bb, bb));
  }
}

}  // namespace
}  // namespace kvlm
