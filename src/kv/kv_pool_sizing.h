// How many blocks the KV pool holds, and the context a request may then
// have (docs/ARCHITECTURE.md "Blocks and the pool"). Plain numbers in and
// out: the caller measures a block from its model and KV type.
#pragma once

#include <cstdint>

namespace kvlm {

struct KvPoolSizing {
  int64_t kv_mem_bytes = 0;          // > 0: the pool's size in bytes (wins over kv_tokens)
  int32_t kv_tokens = 0;             // > 0: the pool's size in tokens (per KV group)
  int32_t max_seqs = 1;              // neither: this many full-context sequences ...
  int64_t memory_budget_bytes = 0;   // ... within this many bytes (default_kv_budget_bytes())
  int32_t block_size = 16;           // token slots per block
  int64_t block_bytes = 0;           // one block's bytes, every layer's K and V
  int32_t num_groups = 1;            // KV groups; each keeps its own blocks
  int32_t model_len = 0;             // the context a request may want, in tokens
};

struct KvPoolSize {
  int32_t num_blocks = 0;
  // model_len, lowered to what the pool holds when it is smaller: a request
  // must fit the pool alone, or it could never finish.
  int32_t max_model_len = 0;
  int64_t pool_tokens = 0;           // tokens one request could hold in the whole pool
};

// A quarter of physical memory, at most 4 GiB.
int64_t default_kv_budget_bytes();

// Throws Error(kInvalidArgument) for a pool of no block or of more than 2^30.
KvPoolSize size_kv_pool(const KvPoolSizing& s);

}  // namespace kvlm
