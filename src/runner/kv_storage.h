// The KV cache's memory: K and V for every block of the pool, for every
// layer. Sized once (from a byte budget or a token count) and never resized.
// Which block belongs to whom is kv/'s business; this class only holds bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/huge_pages.h"
#include "common/strong_id.h"

#include "model/forward_batch.h"
#include "model/model.h"
#include "runner/kv_prefault.h"

namespace kvlm {

class KvStorage {
 public:
  // Storage for `num_blocks` blocks of `block_size` slots for `model`.
  // Layers of different KV groups share storage rows: a block id belongs to
  // one group at a time, so only max(layers per group) layer rows are needed.
  KvStorage(const Model& model, DType dtype, int32_t block_size, int32_t num_blocks);

  // Bytes one block takes (K and V, all layers of a group).
  static size_t bytes_per_block(const Model& model, DType dtype, int32_t block_size);
  // Throws Error(kInvalidArgument) if the model's head size or the block
  // size does not suit dtype.
  static void check_dtype(const Model& model, DType dtype, int32_t block_size);

  KvStorage(const KvStorage&) = delete;
  KvStorage& operator=(const KvStorage&) = delete;

  int32_t num_blocks() const { return num_blocks_; }
  int32_t block_size() const { return layout_.block_size; }
  size_t num_bytes() const { return num_bytes_; }
  const KvCacheView& view() const { return view_; }

  // One block's bytes as a KV tier keeps them (kvstore/tier_stack.h): for
  // each layer row in order, its K block then its V block, each
  // view().layout.block_bytes() long; block_bytes() in all (equal to
  // bytes_per_block(model, dtype, block_size)). Preconditions: id is a block
  // of this storage; the span is exactly block_bytes() long.
  size_t block_bytes() const { return 2 * layout_.block_bytes() * num_rows_; }
  void read_block(BlockId id, std::span<std::byte> out) const;
  void write_block(BlockId id, std::span<const std::byte> in);

  // Block `block` is about to be written: the pool's pages through a
  // lookahead past it are committed on a thread of their own (KvPrefaulter),
  // not by faults in the step that writes them. Returns at once.
  void note_use(BlockId block) { prefaulter_->note_use(block.value()); }
  const KvPrefaulter& prefaulter() const { return *prefaulter_; }

 private:
  KvLayout layout_;
  int32_t num_blocks_;
  size_t num_rows_ = 0;  // layer rows (max layers of one KV group)
  // Anonymous mapping: the kernel hands out zeroed pages on first touch, so a
  // large pool costs address space up front and memory only as it fills.
  HugePageBuffer pool_;
  std::unique_ptr<KvPrefaulter> prefaulter_;  // after pool_: stops before the pool is unmapped
  size_t num_bytes_ = 0;
  KvCacheView view_;
};

}  // namespace kvlm
