// Commits the KV pool's memory a little ahead of its use, on a thread of its
// own, so that no step waits for the kernel to hand out pages.
//
// The pool is mapped lazily (KvStorage): a page costs memory only once
// written, and the first write faults it in. The free queue hands out blocks
// it has never used in id order (kv/block_pool.h), so until every block has
// been used once, the step whose blocks cross into a new 2 MiB page faults in
// one page per layer row for K and one for V. Those faults landed on the step
// thread: 44 pages (88 MiB) at TinyLlama's shape, which this 2-core VM, whose
// host backs guest memory on first touch, faulted in at 0.6 GB/s (140 ms;
// 5-13 ms where the host already backed it): the first request's TTFT, and
// a stall every 4,096 tokens of new KV until every block had been used.
//
// A KvPrefaulter keeps at least half a lookahead of blocks past the highest
// block in use committed with madvise(MADV_POPULATE_WRITE), which faults pages
// in as a write would but leaves their bytes alone: the step thread may write
// the blocks it owns at the same time. The lookahead is one 2 MiB page of
// every region (at least kMinLookaheadBlocks blocks), so the pool holds at
// most that much more than it has used. The thread runs at the lowest
// priority: on cores the compute threads keep busy it gets little time, and
// the step that outruns it faults the rest in itself, as before. Where the
// kernel lacks MADV_POPULATE_WRITE (before Linux 5.14) or refuses,
// prefaulting stops and pages fault in on first use.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>

namespace kvlm {

class KvPrefaulter {
 public:
  static constexpr int32_t kMinLookaheadBlocks = 16;

  // The pool: `num_regions` regions of `num_blocks` blocks of `block_bytes`
  // each, region i at base + i * num_blocks * block_bytes, in the order a
  // forward pass first writes them (layer by layer, K then V). Commits the
  // first lookahead before it returns, then starts the thread.
  KvPrefaulter(uint8_t* base, size_t num_regions, size_t block_bytes, int32_t num_blocks);
  ~KvPrefaulter();
  KvPrefaulter(const KvPrefaulter&) = delete;
  KvPrefaulter& operator=(const KvPrefaulter&) = delete;

  // Block `block` is in use. Where fewer than half a lookahead of blocks
  // past it are committed, commit through block + lookahead. Returns at
  // once; the thread does the work.
  void note_use(int32_t block);

  int32_t lookahead_blocks() const { return lookahead_; }
  // Blocks [0, target_blocks()) are committed or being committed.
  int32_t target_blocks() const;
  // Blocks [0, committed_blocks()) are committed in every region.
  int32_t committed_blocks() const;
  // Blocks until committed_blocks() >= n or prefaulting has stopped (tests).
  void wait_committed(int32_t n) const;

 private:
  void run();
  // Commits blocks [from, to) of every region; false where the kernel refused.
  bool commit(int32_t from, int32_t to) const;

  uint8_t* base_;
  size_t num_regions_;
  size_t block_bytes_;
  int32_t num_blocks_;
  int32_t lookahead_;

  mutable std::mutex mu_;
  mutable std::condition_variable wake_;  // the thread: a new target, or stop
  mutable std::condition_variable done_;  // wait_committed: progress
  int32_t target_ = 0;     // commit blocks [0, target_)
  int32_t committed_ = 0;  // blocks [0, committed_) are committed
  bool stopped_ = false;   // the kernel refused, or the destructor runs
  std::thread thread_;
};

}  // namespace kvlm
