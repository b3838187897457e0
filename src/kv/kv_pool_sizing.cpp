#include "kv/kv_pool_sizing.h"

#include <algorithm>

#include <unistd.h>

#include "common/error.h"

namespace kvlm {
namespace {

// The pool's size in blocks from the flags: --kv-mem bytes, else --ctx
// tokens, else max_seqs full-length sequences within a memory budget.
int64_t pool_blocks(const KvPoolSizing& s) {
  if (s.kv_mem_bytes > 0) return s.kv_mem_bytes / s.block_bytes;
  // Every group keeps its own blocks; a full group needs ceil(tokens / bs).
  if (s.kv_tokens > 0) return int64_t{s.num_groups} * ((s.kv_tokens + s.block_size - 1) / s.block_size);
  // The pool is mapped lazily, so unused capacity costs address space only.
  const int64_t blocks_per_seq = int64_t{s.num_groups} * ((s.model_len + s.block_size - 1) / s.block_size);
  int64_t num_blocks = blocks_per_seq * s.max_seqs;
  if (num_blocks * s.block_bytes > s.memory_budget_bytes)
    num_blocks = std::max<int64_t>(blocks_per_seq, s.memory_budget_bytes / s.block_bytes);
  return num_blocks;
}

}  // namespace

int64_t default_kv_budget_bytes() {
  const int64_t pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  const int64_t quarter = pages > 0 && page > 0 ? pages * page / 4 : (int64_t{1} << 30);
  return std::min<int64_t>(quarter, int64_t{4} << 30);
}

KvPoolSize size_kv_pool(const KvPoolSizing& s) {
  const int64_t num_blocks = pool_blocks(s);
  if (num_blocks < 1)
    throw_error(ErrorCode::kInvalidArgument, "the KV pool holds no block: one block of {} tokens takes {} bytes",
                s.block_size, s.block_bytes);
  if (num_blocks > (1 << 30)) throw_error(ErrorCode::kInvalidArgument, "KV pool of {} blocks is too large", num_blocks);
  KvPoolSize size;
  size.num_blocks = static_cast<int32_t>(num_blocks);
  size.pool_tokens = num_blocks / s.num_groups * s.block_size;
  size.max_model_len = size.pool_tokens < s.model_len ? static_cast<int32_t>(size.pool_tokens) : s.model_len;
  return size;
}

}  // namespace kvlm
