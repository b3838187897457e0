// The KV cache as every backend sees it: the byte layout of one layer's
// blocks, the base pointers of a layer, and what one step attends over. Plain
// data. The layout is also the format of KV blocks saved to the tiers
// (kvstore/kv_namespace.h), so a backend keeps it rather than choosing its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

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

}  // namespace kvlm
