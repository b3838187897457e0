// The pieces the per-path attention kernels share (attention_kernels.cpp,
// and attention_bf16.cpp for BF16 storage): how one query row's visible
// range splits into blocks, and the padded score rows. Per path (simd.h's
// KVLM_SIMD_NS) and of internal linkage, as local_vector.h explains.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backend/cpu/attention.h"
#include "backend/cpu/local_vector.h"
#include "backend/cpu/ops_impl.h"
#include "backend/cpu/simd.h"

namespace kvlm::cpu::KVLM_SIMD_NS {

// Query heads of one GQA group handled in one pass over its keys and values:
// each K and V element is loaded (and converted from F16) once for all of
// them instead of once per head. 8 covers TinyLlama and Llama-3 (8 heads per
// KV head) and fits the AVX2 registers (8 accumulators, a key, a broadcast).
constexpr int kMaxGroupPass = 8;

// Floats of padding before and after each score row: the 16-slot paths store
// whole vectors, and the first and last vectors of a range may start up to 15
// slots before it or end up to 15 past it; those lanes land here, unread.
constexpr int64_t kRowPad = 16;

// Vectors (blocks, at the default size) between a load and the prefetch made
// for it. Blocks are scattered in the pool, so the hardware prefetchers, which
// follow addresses, cannot run ahead through the block table. The kernels
// prefetch into L2 (_MM_HINT_T1), not L1: one KV head's slice of a block is
// 2 KiB at TinyLlama's shape, and a core reading such slices from scattered
// blocks got 10 GB/s with prefetches into L1 (as with none: the L1 misses
// it can keep in flight are the limit) and 19 GB/s into L2 (Zen 5, one
// thread, 4 MiB a layer). Decode at 4,096 tokens went from 35.7-39.3 to
// 38.9-40.8 tokens/s (TinyLlama Q4_0, F16 KV, alternated runs).
constexpr size_t kPrefetchAhead = 4;

// Runs fn.template operator()<N>() for N = num_q in [1, kMaxGroupPass]: the
// vector loops take the number of heads as a template argument, because with
// a run-time count the compiler keeps the accumulators on the stack and every
// multiply-add goes through memory (measured 1.5 ms against 0.5 ms for one
// layer of TinyLlama at 4,096 tokens).
template <typename Fn>
void with_num_q(int num_q, Fn&& fn) {
  switch (num_q) {
    case 1: fn.template operator()<1>(); break;
    case 2: fn.template operator()<2>(); break;
    case 3: fn.template operator()<3>(); break;
    case 4: fn.template operator()<4>(); break;
    case 5: fn.template operator()<5>(); break;
    case 6: fn.template operator()<6>(); break;
    case 7: fn.template operator()<7>(); break;
    default: fn.template operator()<8>(); break;
  }
}
static_assert(kMaxGroupPass == 8, "with_num_q covers 1..8");

// One query row, up to kMaxGroupPass heads of one GQA group, over BF16
// storage (attention_bf16.cpp): scores, softmax and weighted values, as
// attend_direct does for F32/F16. stat_row (nullable): the heads' weights
// are added to stat_row[lo .. hi).
void attend_bf16(const KvLayout& layout, const KvLayer& layer, const AttentionSeq& seq, int32_t kv_head, int64_t lo,
                 int64_t hi, const float* const* qs, int num_q, const AttentionParams& params, float* const* outs,
                 float* stat_row);

// The same over Q8_0 storage (attention_q8_0.cpp): the query quantized to
// Q8_0, integer dot products against the keys, values dequantized in place.
void attend_q8_0(const KvLayout& layout, const KvLayer& layer, const AttentionSeq& seq, int32_t kv_head, int64_t lo,
                 int64_t hi, const float* const* qs, int num_q, const AttentionParams& params, float* const* outs,
                 float* stat_row);

// The same over Q4_0 storage (attention_q4_0.cpp): the query quantized to
// Q8_0, integer dot products against the 4-bit keys, values dequantized in place.
void attend_q4_0(const KvLayout& layout, const KvLayer& layer, const AttentionSeq& seq, int32_t kv_head, int64_t lo,
                 int64_t hi, const float* const* qs, int num_q, const AttentionParams& params, float* const* outs,
                 float* stat_row);

namespace {  // NOLINT(google-build-namespaces): one copy per path (local_vector.h)

// One block's share of a visible range for one KV head: its K and V data,
// the offsets [o0, o1) it contributes, and the score-row index of its offset
// 0 (negative when the range enters the block at o0 > 0). The block table is
// read once per pass, not once per phase.
struct BlockPart {
  const uint8_t* k;
  const uint8_t* v;
  int32_t o0, o1;
  int64_t at;
};

// 16 consecutive slots of one K block (offsets a multiple of 16) and the
// score-row index of its first slot.
struct KeyVec {
  const uint8_t* k;
  int64_t at;
};

void collect_parts(const KvLayout& layout, const KvLayer& layer, const AttentionSeq& seq, int32_t kv_head,
                   int64_t lo, int64_t hi, LocalVector<BlockPart>& parts) {
  const int32_t bs = layout.block_size;
  // Byte offsets worked out once per call, not per block (a division and a
  // dtype lookup each: most of attend_direct's own 6% of a 4,096-slot decode
  // in a perf profile).
  const size_t block_bytes = layout.block_bytes();
  const size_t head_offset = static_cast<size_t>(kv_head) * layout.head_stride();
  const int64_t first = lo / bs, last = (hi + bs - 1) / bs;  // blocks [first, last)
  parts.resize(static_cast<size_t>(last - first));
  for (int64_t b = first; b < last; ++b) {
    const int64_t start = b * bs;  // logical slot of offset 0
    const size_t at = static_cast<size_t>(seq.block_table[static_cast<size_t>(b)]) * block_bytes + head_offset;
    parts[static_cast<size_t>(b - first)] = {layer.k + at, layer.v + at,
                                             static_cast<int32_t>(std::max<int64_t>(0, lo - start)),
                                             static_cast<int32_t>(std::min<int64_t>(bs, hi - start)), start - lo};
  }
}

// Score rows of num_q heads over n slots, each padded by kRowPad on both
// sides (vector stores), in one buffer: rows[g] is head g's slot 0.
void make_score_rows(LocalVector<float>& buffer, int num_q, int64_t n, float** rows) {
  const int64_t row_stride = (n + 2 * kRowPad + 15) / 16 * 16;
  buffer.resize(static_cast<size_t>(num_q * row_stride));
  for (int g = 0; g < num_q; ++g) rows[g] = buffer.data() + g * row_stride + kRowPad;
}

// stat_row (nullable): the weights of the num_q heads, in head order, are
// added to stat_row[lo .. hi).
void add_weights(float* stat_row, int64_t lo, const float* weights, int64_t n) {
  for (int64_t j = 0; j < n; ++j) stat_row[lo + j] += weights[j];
}

// Between the scores and the weighted values, for every kernel: each head's
// score row (n slots from lo) soft-capped, turned into softmax weights and
// added to the statistics, and its output zeroed for the value sums.
void weigh_scores(float* const* rows, int num_q, int64_t n, int64_t lo, const AttentionParams& params,
                  float* stat_row, float* const* outs, int64_t head_dim) {
  for (int g = 0; g < num_q; ++g) {
    if (params.softcap > 0.f) soft_cap(rows[g], n, params.softcap);
    softmax(rows[g], 1, n);
    if (stat_row) add_weights(stat_row, lo, rows[g], n);
    std::memset(outs[g], 0, sizeof(float) * head_dim);
  }
}

}  // namespace
}  // namespace kvlm::cpu::KVLM_SIMD_NS
