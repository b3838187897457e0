// Memory for data streamed from DRAM (packed weights, the KV pool) on 2 MiB
// pages where the kernel grants them. On 4 KiB pages the hardware
// prefetchers stop at every page boundary and a decode step that touches
// scattered slices (a KV block's 2 KiB of one head) misses the TLB at nearly
// every one; 2 MiB pages end both.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvlm {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

enum class PageAdvice {
  kHuge,   // MADV_HUGEPAGE: advice only; a refusal leaves 4 KiB pages
  kSmall,  // MADV_NOHUGEPAGE: 4 KiB pages (benchmarks compare the two)
};

// Anonymous zeroed memory starting on a 2 MiB boundary (so that every 2 MiB of
// it can be one page), mapped (RAII). Pages are committed when first written.
// Under 2 MiB asked: whole 4 KiB pages, 4 KiB aligned, without the advice.
class HugePageBuffer {
 public:
  HugePageBuffer() = default;
  // `bytes` > 0. Throws Error(kUnavailable) naming `what` when the address
  // space cannot be reserved.
  HugePageBuffer(size_t bytes, const char* what, PageAdvice advice = PageAdvice::kHuge);
  ~HugePageBuffer();
  HugePageBuffer(HugePageBuffer&& other) noexcept;
  HugePageBuffer& operator=(HugePageBuffer&& other) noexcept;
  HugePageBuffer(const HugePageBuffer&) = delete;
  HugePageBuffer& operator=(const HugePageBuffer&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Gives back the memory of [data, data + bytes) that nothing reads any more
// (a matrix's file bytes once packed): the whole 4 KiB pages inside the
// range are reclaimed (MADV_PAGEOUT, Linux 5.4): file pages leave the
// process (and the page cache), anonymous ones go to swap if there is any.
// The contents stay what they were (a later read faults them back in), so
// this is only advice; a kernel that refuses it changes nothing.
void release_pages(const void* data, size_t bytes);

}  // namespace kvlm
