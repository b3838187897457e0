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

namespace kvlm {

// Shape of the KV storage of one layer: [num_blocks][num_kv_heads] and then,
// per block and head,
//   V: [block_size][head_dim]   slot rows, so a weighted sum streams rows;
//   K: [head_dim][block_size]   transposed (F32/F16), so eight consecutive
//      slots of one dimension are one vector load and a query's scores come
//      out eight keys at a time, each summed over the head in order;
//      for Q8_0, [head_dim / 32][block_size] fp16 scales and then
//      [head_dim / 4][block_size][4] int8 quants: four dimensions of a slot
//      in one 32-bit lane, 16 slots per 64-byte vector, as the int8 dot
//      product (VPDPBUSD) takes them. V keeps Q8_0 rows, [block_size] rows
//      of head_dim / 32 blocks.
// Q4_0 keys, like Q8_0's, put slots side by side: [head_dim / 32][block_size]
//      fp16 scales and then [head_dim / 8][block_size][4] bytes, eight
//      dimensions of a slot in one 32-bit lane (byte i: dimension 8j + i in
//      its low nibble, 8j + 4 + i in its high one), so 16 slots' 8
//      dimensions are one 64-byte vector and a mask or a shift gives the
//      four-dimension lanes the int8 dot product takes. V keeps Q4_0 rows.
// BF16 pairs its elements for the BF16 dot product (VDPBF16PS), which sums
// two adjacent products per 32-bit lane:
//   K: [head_dim / 2][block_size][2]   dimensions 2j and 2j+1 of a slot side by
//      side, 16 slots of one dimension pair per 64-byte vector;
//   V: [block_size / 2][head_dim][2]   slots 2i and 2i+1 of a dimension side by
//      side, 16 dimensions of one slot pair per vector.
// Either way one block of one KV head is contiguous.
struct KvLayout {
  DType dtype = DType::kF16;   // F32, F16, BF16 (even head_dim and block_size)
                               // or Q8_0 / Q4_0 (head_dim % 32 == 0)
  int32_t block_size = 16;     // token slots per block
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;

  size_t row_bytes() const { return kvlm::row_bytes(dtype, head_dim); }  // one slot, one head
  size_t head_stride() const { return row_bytes() * static_cast<size_t>(block_size); }
  size_t block_bytes() const { return head_stride() * static_cast<size_t>(num_kv_heads); }  // one layer, K or V
  bool keys_transposed() const { return dtype == DType::kF32 || dtype == DType::kF16; }
  bool pairs_bf16() const { return dtype == DType::kBF16; }
  bool keys_q8_0() const { return dtype == DType::kQ8_0; }
  bool kv_q4_0() const { return dtype == DType::kQ4_0; }
  // Q8_0 and Q4_0: the query is quantized to Q8_0 for integer dot products.
  bool query_q8_0() const { return keys_q8_0() || kv_q4_0(); }
};

// Q8_0 storage scatters a key through a row buffer on the stack, and both
// quantized types quantize the query into one.
constexpr int32_t kMaxQ8_0KvHeadDim = 512;

// Base pointers of one layer's K and V storage (each num_blocks * block_bytes()).
struct KvLayer {
  uint8_t* k = nullptr;
  uint8_t* v = nullptr;
};

// One sequence's part of a step. Its KV slots are numbered 0..num_context-1 in
// logical order; slot s lives in block block_table[s / block_size] at offset
// s % block_size. The step's query rows token_begin .. token_begin+num_tokens-1
// are the sequence's last num_tokens slots, and query i sees slots
// [0, num_context - num_tokens + i] (causal), further limited by a window.
struct AttentionSeq {
  int32_t token_begin = 0;
  int32_t num_tokens = 0;
  int32_t num_context = 0;
  std::span<const int32_t> block_table;  // physical block ids; entries before the
                                         // window may be stale (never read)
  // Optional attention statistics for KV policies: [num_tokens][num_kv_heads]
  // [num_context]; each call adds, for query row i and KV head h, the softmax
  // weights of h's query heads (summed in head order) to the visible slots.
  // Layers add in turn, so the sum is the same however the step was batched.
  float* attn_stats = nullptr;
};

struct AttentionParams {
  int32_t num_heads = 0;      // query heads; num_heads % num_kv_heads == 0 (GQA)
  float scale = 1.f;          // usually 1/sqrt(head_dim)
  float softcap = 0.f;        // > 0: scores = softcap * tanh(scores / softcap) (Gemma-2)
  int32_t window = 0;         // > 0: query at slot s sees only slots (s - window, s]
};

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

// Reads one stored key or value back as f32 (tests, KV re-rotation).
// slot: physical slot. out: [head_dim].
void kv_read_key(const KvLayout& layout, const KvLayer& layer, int64_t slot, int32_t kv_head, float* out);
void kv_read_value(const KvLayout& layout, const KvLayer& layer, int64_t slot, int32_t kv_head, float* out);

}  // namespace kvlm
