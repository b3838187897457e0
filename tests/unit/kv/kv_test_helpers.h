// Helpers the kv/ tests share: token runs and block id lists.
#pragma once

#include <initializer_list>
#include <numeric>
#include <vector>

#include "kv/block_pool.h"

namespace kvlm::test {

// n tokens start, start + 1, ...
inline std::vector<int32_t> iota_tokens(int32_t n, int32_t start = 0) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

inline std::vector<BlockId> ids(std::initializer_list<int32_t> v) {
  std::vector<BlockId> out;
  for (int32_t i : v) out.emplace_back(i);
  return out;
}

}  // namespace kvlm::test
