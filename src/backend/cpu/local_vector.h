// std::vector with an allocator of internal linkage, for the translation
// units compiled once per ISA path (ops_impl.h, matmul_impl.h). A plain
// std::vector<float> there instantiates weak library functions under their
// usual names; the linker keeps one copy for the whole program, which could be
// the AVX-512 one (tests/scripts/check_isa_symbols.sh rejects such symbols).
// With this allocator every instantiation is local to its translation unit.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace kvlm::cpu {
namespace {  // NOLINT(google-build-namespaces): internal linkage per translation unit is the point

template <typename T>
struct LocalAllocator {
  using value_type = T;
  LocalAllocator() = default;
  template <typename U>
  LocalAllocator(const LocalAllocator<U>&) {}  // NOLINT(google-explicit-constructor): allocator rebinding
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T))); }
  void deallocate(T* p, size_t) { ::operator delete(p); }
  template <typename U>
  bool operator==(const LocalAllocator<U>&) const { return true; }
};

template <typename T>
using LocalVector = std::vector<T, LocalAllocator<T>>;

}  // namespace
}  // namespace kvlm::cpu
