// Paged attention: each sequence reads its keys and values through a block
// table, so sequences share one pool of fixed-size KV blocks
// (docs/ARCHITECTURE.md "The KV cache"). Pure compute: which blocks a
// sequence owns is decided in kv/ and sched/; this file only follows the
// table it is given.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "backend/cpu/ops.h"
#include "backend/dtype.h"
#include "backend/kv_layout.h"

namespace kvlm {

// Q8_0 storage scatters a key through a row buffer on the stack, and both
// quantized types quantize the query into one.
constexpr int32_t kMaxQ8_0KvHeadDim = 512;

// Writes K and V rows of `num_tokens` tokens into their slots.
// k, v: [num_tokens, num_kv_heads, head_dim] f32; slots: [num_tokens], physical
// slot = block_id * block_size + offset.
void kv_write(const KvLayout& layout, const KvLayer& layer, const float* k, const float* v,
              const int64_t* slots, int64_t num_tokens);

// out[t, h, :] = softmax(q[t, h, :] . K^T * scale) . V over the visible slots.
// q, out: [num_tokens_total, num_heads, head_dim] f32. With BF16 storage the
// query and the softmax weights are rounded to BF16, as the BF16 dot product
// (VDPBF16PS) takes them, and each sum runs over element pairs, the odd
// product before the even one, subnormal sums flushed (attention_bf16.cpp).
// So it is as exact on every CPU path, and batch-invariant, as F16 storage.
// With Q8_0 storage the query is quantized to Q8_0 as the keys are (as
// llama.cpp's attention does), each 32-dimension block's dot product is an
// exact integer sum, and a score adds those blocks in order, each times the
// product of the two scales (attention_q8_0.cpp); the values are dequantized
// (scale times quant, in f32) and summed over the slots in order. Q4_0
// storage does the same with 4-bit quants (quant - 8, attention_q4_0.cpp).
void paged_attention(const KvLayout& layout, const KvLayer& layer, const float* q,
                     std::span<const AttentionSeq> seqs, const AttentionParams& params, float* out);

// Scalar reference of paged_attention (double accumulation, single thread).
void paged_attention_reference(const KvLayout& layout, const KvLayer& layer, const float* q,
                               std::span<const AttentionSeq> seqs, const AttentionParams& params,
                               float* out);

// KV byte work for evictions (kv/kv_ops.h), exact for every KV dtype:
// copies a whole block, moves one slot's K and V (physical slots), and
// re-rotates the key stored in a slot by `delta` positions (RoPE rotations
// compose, so rotating by the delta re-positions a key without recomputing it).
void kv_copy_block(const KvLayout& layout, const KvLayer& layer, int64_t src_block, int64_t dst_block);
void kv_move_slot(const KvLayout& layout, const KvLayer& layer, int64_t src_slot, int64_t dst_slot);
void kv_rotate_key(const KvLayout& layout, const KvLayer& layer, int64_t slot, int32_t delta, const RopeParams& rope);

// out[t] = sum over heads of |k_t - stored key|^2 + |v_t - stored value|^2
// for each token's slot (KV chunks' probe, Backend::kv_deviation).
void kv_deviation(const KvLayout& layout, const KvLayer& layer, const float* k, const float* v,
                  const int64_t* slots, int64_t num_tokens, float* out);

// Reads one stored key or value back as f32 (tests, KV re-rotation).
// slot: physical slot. out: [head_dim].
void kv_read_key(const KvLayout& layout, const KvLayer& layer, int64_t slot, int32_t kv_head, float* out);
void kv_read_value(const KvLayout& layout, const KvLayer& layer, int64_t slot, int32_t kv_head, float* out);

}  // namespace kvlm
