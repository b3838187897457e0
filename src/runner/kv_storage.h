// The KV cache's memory: K and V for every block of the pool, for every
// layer. Sized once (from a byte budget or a token count) and never resized.
// Which block belongs to whom is kv/'s business; this class only holds bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "model/forward_batch.h"
#include "model/model.h"

namespace kvlm {

class KvStorage {
 public:
  // Storage for `num_blocks` blocks of `block_size` slots for `model`.
  // Layers of different KV groups share storage rows: a block id belongs to
  // one group at a time, so only max(layers per group) layer rows are needed.
  KvStorage(const Model& model, DType dtype, int32_t block_size, int32_t num_blocks);

  // Bytes one block takes (K and V, all layers of a group).
  static size_t bytes_per_block(const Model& model, DType dtype, int32_t block_size);
  // Throws Error(kInvalidArgument) if the model's head size does not suit dtype.
  static void check_dtype(const Model& model, DType dtype);

  ~KvStorage();
  KvStorage(const KvStorage&) = delete;
  KvStorage& operator=(const KvStorage&) = delete;

  int32_t num_blocks() const { return num_blocks_; }
  int32_t block_size() const { return layout_.block_size; }
  size_t num_bytes() const { return num_bytes_; }
  const KvCacheView& view() const { return view_; }

 private:
  KvLayout layout_;
  int32_t num_blocks_;
  // Anonymous mapping: the kernel hands out zeroed pages on first touch, so a
  // large pool costs address space up front and memory only as it fills.
  uint8_t* bytes_ = nullptr;
  size_t num_bytes_ = 0;
  KvCacheView view_;
};

}  // namespace kvlm
