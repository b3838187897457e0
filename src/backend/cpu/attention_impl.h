// Helpers shared by attention.cpp and the per-path attention kernels
// (attention_kernels.cpp). Inline, in the path's own namespace (KVLM_SIMD_NS,
// simd.h), so no copy compiled with one path's flags serves another.
// (attention.cpp is the plain compile: its namespace is kvlm::cpu::base.)
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backend/cpu/attention.h"
#include "backend/cpu/simd.h"
#include "backend/dtype.h"
#include "backend/fp16.h"
#include "common/assert.h"

namespace kvlm::cpu::KVLM_SIMD_NS {

inline float madd(float a, float b, float c) {
#if defined(__FMA__)
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

// Start of one block's data for one KV head.
inline uint8_t* block_head(const KvLayout& layout, uint8_t* base, int64_t block, int32_t kv_head) {
  return base + static_cast<size_t>(block) * layout.block_bytes() + static_cast<size_t>(kv_head) * layout.head_stride();
}

inline int64_t block_of(const KvLayout& layout, const AttentionSeq& seq, int64_t s) {
  return seq.block_table[static_cast<size_t>(s / layout.block_size)];
}

constexpr int64_t kMaxQ8Blocks = kMaxQ8_0KvHeadDim / 32;  // Q8_0 blocks of a key (check_layout)

inline void check_layout(const KvLayout& layout, const AttentionParams* params) {
  KVLM_ASSERT(layout.dtype == DType::kF32 || layout.dtype == DType::kF16 || layout.dtype == DType::kBF16 ||
                  layout.dtype == DType::kQ8_0 || layout.dtype == DType::kQ4_0,
              "KV dtype must be F32, F16, BF16, Q8_0 or Q4_0");
  KVLM_ASSERT(layout.head_dim % dtype_info(layout.dtype).block_size == 0,
              "head_dim must be a multiple of the KV dtype block size");
  KVLM_ASSERT(!layout.query_q8_0() || layout.head_dim <= kMaxQ8_0KvHeadDim, "quantized KV head_dim past kMaxQ8_0KvHeadDim");
  KVLM_ASSERT(!layout.pairs_bf16() || (layout.head_dim % 2 == 0 && layout.block_size % 2 == 0),
              "BF16 KV pairs need an even head_dim and block_size");
  if (params) KVLM_ASSERT(params->num_heads % layout.num_kv_heads == 0, "GQA head ratio");
}

// Visible logical slots [lo, hi) of query row i of a sequence.
inline void visible_range(const AttentionSeq& seq, int32_t i, int32_t window, int64_t* lo, int64_t* hi) {
  *hi = seq.num_context - seq.num_tokens + i + 1;
  *lo = window > 0 ? std::max<int64_t>(0, *hi - window) : 0;
}

// Bytes of one element of F32/F16 storage.
inline int64_t kv_elem_bytes(const KvLayout& layout) { return layout.dtype == DType::kF32 ? 4 : 2; }

// Index of element (dim c, slot offset o) in one head's K block, and in its
// V block, of F32/F16/BF16 storage (attention.h, KvLayout).
inline int64_t key_index(const KvLayout& layout, int64_t c, int64_t o) {
  if (layout.pairs_bf16()) return (c >> 1) * 2 * layout.block_size + 2 * o + (c & 1);
  return c * layout.block_size + o;
}
inline int64_t value_index(const KvLayout& layout, int64_t c, int64_t o) {
  if (layout.pairs_bf16()) return (o >> 1) * 2 * layout.head_dim + 2 * c + (o & 1);
  return o * layout.head_dim + c;
}

// Q8_0 keys (attention.h, KvLayout): one head's K block holds the fp16 scales,
// [head_dim / 32][block_size], and then the quants, [head_dim / 4][block_size][4].
// Byte offsets of slot o's scale of Q8_0 block b, and of its quant of dim c.
inline int64_t q8_key_scale_offset(const KvLayout& layout, int64_t b, int64_t o) {
  return 2 * (b * layout.block_size + o);
}
inline int64_t q8_key_quants_offset(const KvLayout& layout) { return 2 * (layout.head_dim / 32) * layout.block_size; }
inline int64_t q8_key_quant_offset(const KvLayout& layout, int64_t c, int64_t o) {
  return q8_key_quants_offset(layout) + ((c >> 2) * layout.block_size + o) * 4 + (c & 3);
}

// Q4_0 keys (attention.h, KvLayout): the scales as Q8_0's, then the quants,
// [head_dim / 8][block_size][4] bytes. Byte offset of slot o's lane of the
// dimensions 8j .. 8j + 7; dimension c is in byte c % 4 of lane c / 8, in
// the low nibble if c % 8 < 4.
inline int64_t q4_key_lane_offset(const KvLayout& layout, int64_t j, int64_t o) {
  return q8_key_quants_offset(layout) + (j * layout.block_size + o) * 4;
}

// Element (dim c, slot offset o) of one head's K block of F32/F16/BF16 storage.
inline float key_at(const KvLayout& layout, const uint8_t* kb, int64_t c, int64_t o) {
  const int64_t idx = key_index(layout, c, o);
  if (layout.dtype == DType::kF32) return reinterpret_cast<const float*>(kb)[idx];
  const uint16_t h = reinterpret_cast<const uint16_t*>(kb)[idx];
  return layout.pairs_bf16() ? bf16_to_f32(h) : fp16_to_f32(h);
}

}  // namespace kvlm::cpu::KVLM_SIMD_NS
