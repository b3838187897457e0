#include "common/huge_pages.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "common/error.h"

namespace kvlm {

HugePageBuffer::HugePageBuffer(size_t bytes, const char* what, PageAdvice advice) {
  // Under one huge page: whole 4 KiB pages. Rounded up to 2 MiB, a small
  // matrix (a LoRA adapter's hundreds of them) would hold a huge page each.
  if (bytes < kHugePageBytes) {
    const size_t size = (bytes + 4095) / 4096 * 4096;
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      throw_error(ErrorCode::kUnavailable, "cannot reserve {} bytes for {}: {}", bytes, what, std::strerror(errno));
    data_ = static_cast<uint8_t*>(p);
    size_ = size;
    return;
  }
  // Reserve a page more than asked, then hand back the unaligned head and
  // the tail past the buffer (mmap aligns to 4 KiB only).
  const size_t size = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  const size_t reserve = size + kHugePageBytes;
  void* p = ::mmap(nullptr, reserve, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    throw_error(ErrorCode::kUnavailable, "cannot reserve {} bytes for {}: {}", bytes, what, std::strerror(errno));
  auto* raw = static_cast<uint8_t*>(p);
  const uintptr_t at = reinterpret_cast<uintptr_t>(raw);
  data_ = raw + ((at + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes - at);
  size_ = size;
  if (data_ > raw) ::munmap(raw, static_cast<size_t>(data_ - raw));
  const size_t tail = reserve - static_cast<size_t>(data_ - raw) - size;
  if (tail > 0) ::munmap(data_ + size, tail);
  ::madvise(data_, size_, advice == PageAdvice::kHuge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
}

HugePageBuffer::~HugePageBuffer() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

HugePageBuffer::HugePageBuffer(HugePageBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

HugePageBuffer& HugePageBuffer::operator=(HugePageBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(data_, size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void release_pages(const void* data, size_t bytes) {
#ifndef MADV_PAGEOUT
  constexpr int MADV_PAGEOUT = 21;  // Linux 5.4 (older headers lack the name)
#endif
  constexpr uintptr_t kPage = 4096;
  const auto begin = reinterpret_cast<uintptr_t>(data);
  const uintptr_t lo = (begin + kPage - 1) & ~(kPage - 1), hi = (begin + bytes) & ~(kPage - 1);
  if (hi > lo) (void)::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_PAGEOUT);
}

}  // namespace kvlm
