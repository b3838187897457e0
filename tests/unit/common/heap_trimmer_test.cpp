// HeapTrimmer (common/heap_trimmer.h): what a burst frees goes back to the
// system once, and a heap that stays fragmented is not trimmed again and
// again for nothing.
#include "common/heap_trimmer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <thread>
#include <vector>

#include <unistd.h>

namespace kvlm {
namespace {

constexpr int64_t kMiB = 1 << 20;

// Under a sanitizer the heap is the sanitizer's, not glibc's: mallinfo2
// sees none of it.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kGlibcHeap = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
constexpr bool kGlibcHeap = false;
#else
constexpr bool kGlibcHeap = true;
#endif
#else
constexpr bool kGlibcHeap = true;
#endif

int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * ::sysconf(_SC_PAGESIZE);
}

bool wait_for_trims(const HeapTrimmer& t, int64_t n) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (t.num_trims() < n && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return t.num_trims() >= n;
}

// 64 MiB in 64 KiB blocks (under glibc's mmap threshold, so on the heap),
// written so they are resident; free_half() then frees every other block,
// leaving 32 MiB free in chunks that cannot merge into the heap's top,
// which glibc would otherwise give back by itself. Two steps, so a test
// measures the burst before a trimmer could give any of it back.
struct FragmentedHeap {
  static constexpr size_t kBlockBytes = 64 << 10;
  std::vector<char*> kept, to_free;

  FragmentedHeap() {
    for (int i = 0; i < 1024; ++i) {
      char* block = new char[kBlockBytes];
      std::memset(block, i, kBlockBytes);
      (i % 2 ? to_free : kept).push_back(block);
    }
  }
  void free_half() {
    for (char* block : to_free) delete[] block;
    to_free.clear();
  }
  ~FragmentedHeap() {
    free_half();
    for (char* block : kept) delete[] block;
  }
};

TEST(HeapTrimmer, GivesBackWhatABurstFreedOnce) {
  if (!kGlibcHeap || HeapTrimmer::free_heap_bytes() == 0) GTEST_SKIP() << "not glibc's heap";
  HeapTrimmer trimmer(16 * kMiB, std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(trimmer.num_trims(), 0) << "nothing was freed yet";

  const int64_t before = resident_bytes();
  FragmentedHeap heap;
  // Measured before anything is freed: a trim cannot come first (under
  // load it did, when the burst freed its half before this look).
  const int64_t burst = resident_bytes();
  ASSERT_GE(burst - before, 48 * kMiB);
  heap.free_half();
  ASSERT_TRUE(wait_for_trims(trimmer, 1));
  EXPECT_LE(resident_bytes(), burst - 16 * kMiB) << "the freed half went back to the system";

  // The freed chunks still count as free: they must not be trimmed again.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(trimmer.num_trims(), 1);

  // A second burst reuses the same chunks and frees them again, maybe
  // between two looks: resident again, so trimmed again.
  const int64_t trimmed = resident_bytes();
  {
    std::vector<std::unique_ptr<char[]>> again;
    for (int i = 0; i < 512; ++i) {
      again.emplace_back(new char[FragmentedHeap::kBlockBytes]);
      std::memset(again.back().get(), i, FragmentedHeap::kBlockBytes);
    }
    // At least the trimmer's threshold: of the 32 MiB, what the first trim
    // gave back comes back as the chunks are written again (not all of it:
    // malloc_trim keeps the pages that hold the chunks' headers).
    ASSERT_GE(resident_bytes() - trimmed, 16 * kMiB);
  }
  ASSERT_TRUE(wait_for_trims(trimmer, 2));
  EXPECT_LE(resident_bytes(), trimmed + 8 * kMiB);
}

TEST(HeapTrimmer, StaysQuietBelowItsThreshold) {
  HeapTrimmer trimmer(256 * kMiB, std::chrono::milliseconds(10));
  FragmentedHeap heap;
  heap.free_half();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(trimmer.num_trims(), 0);
}

}  // namespace
}  // namespace kvlm
