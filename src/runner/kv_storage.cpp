#include "runner/kv_storage.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backend/cpu/attention.h"
#include "backend/cpu/cpu_path.h"
#include "common/assert.h"
#include "common/error.h"
#include "common/log.h"

namespace kvlm {
namespace {

size_t max_group_layers(const Model& model) {
  size_t n = 0;
  for (const auto& g : model.kv_groups()) n = std::max(n, g.layers.size());
  return n;
}

KvLayout make_layout(const Model& model, DType dtype, int32_t block_size) {
  KvLayout layout;
  layout.dtype = dtype;
  layout.block_size = block_size;
  layout.num_kv_heads = model.config().num_kv_heads;
  layout.head_dim = model.config().head_dim;
  return layout;
}

}  // namespace

void KvStorage::check_dtype(const Model& model, DType dtype, int32_t block_size) {
  if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16 && dtype != DType::kQ8_0 &&
      dtype != DType::kQ4_0)
    throw_error(ErrorCode::kInvalidArgument, "KV cache type {} is not supported (f16, bf16, f32, q8_0, q4_0)",
                dtype_name(dtype));
  // BF16 keeps elements in pairs of dimensions (keys) and of slots (values).
  if (dtype == DType::kBF16 && (model.config().head_dim % 2 != 0 || block_size % 2 != 0))
    throw_error(ErrorCode::kInvalidArgument,
                "KV cache type bf16 needs an even head size and block size; this model's head size is {}, "
                "the block size {}",
                model.config().head_dim, block_size);
  if ((dtype == DType::kQ8_0 || dtype == DType::kQ4_0) && model.config().head_dim > kMaxQ8_0KvHeadDim)
    throw_error(ErrorCode::kInvalidArgument, "KV cache type {} supports head sizes up to {}; this model's is {}",
                dtype_name(dtype), kMaxQ8_0KvHeadDim, model.config().head_dim);
  int32_t bs = dtype_info(dtype).block_size;
  if (model.config().head_dim % bs != 0)
    throw_error(ErrorCode::kInvalidArgument,
                "KV cache type {} needs a head size that is a multiple of {}; this model's is {}",
                dtype_name(dtype), bs, model.config().head_dim);
}

size_t KvStorage::bytes_per_block(const Model& model, DType dtype, int32_t block_size) {
  return 2 * make_layout(model, dtype, block_size).block_bytes() * max_group_layers(model);
}

KvStorage::KvStorage(const Model& model, DType dtype, int32_t block_size, int32_t num_blocks)
    : layout_(make_layout(model, dtype, block_size)), num_blocks_(num_blocks) {
  check_dtype(model, dtype, block_size);
  const CpuPath path = active_cpu_path();
  if (dtype == DType::kBF16 && (path != CpuPath::kAvx512 || !cpu_has_avx512_bf16()))
    log_warn("KV cache type bf16 without AVX512-BF16 (CPU path {}): attention sums its BF16 products in f32, "
             "slower than with f16 (attention_bf16.cpp)",
             cpu_path_name(path));
  const size_t layer_bytes = layout_.block_bytes() * static_cast<size_t>(num_blocks);
  num_rows_ = max_group_layers(model);
  num_bytes_ = 2 * layer_bytes * num_rows_;
  // On 2 MiB pages: a decode step reads each block's slice of one KV head
  // (2 KiB at TinyLlama's shape) from blocks scattered over the pool, 92 MiB at
  // 4,096 tokens, far past the 4 KiB TLB's reach.
  pool_ = HugePageBuffer(num_bytes_, "the KV cache");
  // Regions in the order a forward pass writes them: row by row, K then V.
  // The prefaulter commits the first lookahead before the pool is handed
  // out, so that the first request does not wait for it: TinyLlama Q4_0 on a
  // 2-core VM whose host backs guest memory on first touch, `bench batch
  // --requests 1 --prompt-len 8`, TTFT 80-185 -> 25-27 ms (3 alternated runs).
  prefaulter_ = std::make_unique<KvPrefaulter>(pool_.data(), 2 * num_rows_, layout_.block_bytes(), num_blocks);
  view_.layout = layout_;
  view_.layers.resize(model.config().num_layers);
  view_.layer_group.resize(model.config().num_layers);
  auto groups = model.kv_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].layers.size(); ++i) {
      int32_t l = groups[g].layers[i];
      uint8_t* base = pool_.data() + 2 * layer_bytes * i;
      view_.layers[l] = KvLayer{base, base + layer_bytes};
      view_.layer_group[l] = static_cast<int32_t>(g);
    }
  }
}

void KvStorage::read_block(BlockId id, std::span<std::byte> out) const {
  KVLM_ASSERT(id.value() >= 0 && id.value() < num_blocks_, "block id out of range");
  KVLM_ASSERT(out.size() == block_bytes(), "read_block needs exactly block_bytes()");
  const size_t bb = layout_.block_bytes();
  const size_t layer_bytes = bb * static_cast<size_t>(num_blocks_);
  const size_t at = bb * static_cast<size_t>(id.value());
  std::byte* dst = out.data();
  for (size_t row = 0; row < num_rows_; ++row) {
    const uint8_t* k = pool_.data() + 2 * layer_bytes * row;  // row's K; its V follows at + layer_bytes
    std::memcpy(dst, k + at, bb);
    std::memcpy(dst + bb, k + layer_bytes + at, bb);
    dst += 2 * bb;
  }
}

void KvStorage::write_block(BlockId id, std::span<const std::byte> in) {
  KVLM_ASSERT(id.value() >= 0 && id.value() < num_blocks_, "block id out of range");
  KVLM_ASSERT(in.size() == block_bytes(), "write_block needs exactly block_bytes()");
  const size_t bb = layout_.block_bytes();
  const size_t layer_bytes = bb * static_cast<size_t>(num_blocks_);
  const size_t at = bb * static_cast<size_t>(id.value());
  const std::byte* src = in.data();
  for (size_t row = 0; row < num_rows_; ++row) {
    uint8_t* k = pool_.data() + 2 * layer_bytes * row;
    std::memcpy(k + at, src, bb);
    std::memcpy(k + layer_bytes + at, src + bb, bb);
    src += 2 * bb;
  }
}

}  // namespace kvlm
