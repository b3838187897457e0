// 128-bit content hashing (XXH3-128). Used for KV block hashes, where a
// collision would return another prompt's KV: 128 bits make that negligible.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>

namespace kvlm {

struct Hash128 {
  uint64_t lo = 0;
  uint64_t hi = 0;
  auto operator<=>(const Hash128&) const = default;
};

Hash128 hash128(const void* data, size_t num_bytes, Hash128 seed = {});

}  // namespace kvlm

template <>
struct std::hash<kvlm::Hash128> {
  size_t operator()(const kvlm::Hash128& h) const noexcept { return h.lo ^ (h.hi * 0x9E3779B97F4A7C15ULL); }
};
