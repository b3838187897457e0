// The attend pipeline over quantized KV storage (Q8_0, Q4_0), compiled once
// per CPU path (ops_impl.h): attention_q8_0.cpp and attention_q4_0.cpp hold
// what their formats truly do differently (how a key vector meets the
// queries, how a value row dequantizes) in a KV-row type, Kv below, and run
// attend_quantized<Kv>. Everything else is one code: the queries quantized
// as the matmuls quantize activations, the slot-by-slot score chain, the
// key vectors of a pass, the softmax, and the value sums.
//
// Scores are integer dot products, as llama.cpp computes them over Q8_0 and
// Q4_0 keys: each 32-dimension block of a score is an exact int32 sum of
// quant products, and the score adds the blocks in order in f32,
//   acc = fma(float(isum_b), qd_b * kd_b, acc),  score = acc * scale.
// Integer sums are exact in any order, so every path gives the same bits
// with whatever instructions it has. Values are dequantized in place (scale
// times quant, exact in f32) and summed over the slots in order with FMAs.
//
// A Kv type provides (static members):
//   kRowBlockBytes      bytes of one value block (fp16 scale, then quants)
//   kKeyBias            the vector kernels read key quants as unsigned bytes
//                       q + kKeyBias (0 where they do not)
//   kQueryForm          which query copies the vector kernels read (QueryForm)
//   kKeyPrefetchAhead   key vectors between a load and its prefetch
//   kPrefetchValues     whether the value sums prefetch the rows ahead
//   kWideValueSums      whether the path sums values in Kv's own kernel,
//                       accumulate_wide<NumQ>(layout, parts, w, out)
//   decode_key(layout, k, o, out)      slot o's quants, signed, in dimension order
//   dequantize_block(blk, vals)        one value block as 32 floats (scalar path)
//   dequantize8(blk, j, ...)           dimensions 8j .. 8j + 7 of a value block (AVX2)
//   score_vec<NumQ>(layout, vec, pf, sc, scale, rows)   one key vector's
//                       scores of NumQ heads, prefetching pf (AVX2 and up)
// Per path (simd.h's KVLM_SIMD_NS) and of internal linkage, as
// local_vector.h explains.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>

#include "backend/cpu/attention_impl.h"
#include "backend/cpu/attention_parts.h"
#include "backend/cpu/local_vector.h"
#include "backend/cpu/matmul_impl.h"
#include "backend/cpu/ops_impl.h"
#include "backend/cpu/simd.h"

namespace kvlm::cpu::KVLM_SIMD_NS {
namespace {  // NOLINT(google-build-namespaces): one copy per path (local_vector.h)

constexpr int64_t kQuantBlock = 32;  // dimensions per Q8_0 / Q4_0 block, keys and values alike

// Slots per key vector of this path's score kernels: one 32-bit lane a slot.
#if KVLM_AVX2 && defined(__AVX512F__)
constexpr int32_t kKeyVecSlots = 16;
#elif KVLM_AVX2
constexpr int32_t kKeyVecSlots = 8;
#endif

// kKeyVecSlots consecutive slots of one K block: the quants of their first
// dimension group (Q8_0) or lane (Q4_0), the scales of their first block,
// and the score-row index of the first slot.
struct QuantKeyVec {
  const uint8_t* quants;
  const uint8_t* scales;
  int64_t at;
};

// What the vector score kernels read of the queries, beside qq and qd.
enum class QueryForm {
  kPlain,   // nothing else (the scalar path's chain)
  kLanes,   // q4 and qoff: VPDPBUSD or VPMADDUBSW against unsigned key quants
  kFloats,  // qf: f32 FMAs over integer-valued floats
};

struct QuantScratch {
  LocalVector<float> scores;  // score rows of one pass (make_score_rows)
  LocalVector<BlockPart> parts;
  LocalVector<QuantKeyVec> key_vecs;
  LocalVector<int8_t> qq;     // the queries' quants, [num_q][head_dim]
  LocalVector<float> qd;      // their scales, [head_dim / 32][num_q]
  LocalVector<uint32_t> q4;   // quants, four dimensions a lane, [head_dim / 4][num_q] (kLanes)
  LocalVector<int32_t> qoff;  // -kKeyBias times each block's quant sum, [head_dim / 32][num_q] (kLanes)
  LocalVector<float> qf;      // quants as f32, [head_dim][num_q] (kFloats)
};

// An fp16 scale, converted inline (simd.h): a call in the value loop made
// GCC spill every accumulator around it.
inline float load_scale(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof(h));
  return simd::half_to_float(h);
}

// The queries quantized as the keys are: quantize_act_q8_0, the matmuls'
// activation quantizer of the same path, gives quantize_row's quants and
// fp16-rounded scales bit for bit, in vector code (quantize_row's scalar
// roundf was 4% of a 4,096-slot layer, perf), and each block's quant sum.
template <typename Kv>
void quantize_queries(const float* const* qs, int num_q, int64_t head_dim, QuantScratch& sc) {
  const int64_t nb = head_dim / kQuantBlock;
  float d[kMaxQ8Blocks];
  int32_t sums[kMaxQ8Blocks];
  sc.qq.resize(static_cast<size_t>(num_q * head_dim));
  sc.qd.resize(static_cast<size_t>(nb * num_q));
  if constexpr (Kv::kQueryForm == QueryForm::kLanes) {
    sc.q4.resize(static_cast<size_t>(head_dim / 4 * num_q));
    sc.qoff.resize(static_cast<size_t>(nb * num_q));
  } else if constexpr (Kv::kQueryForm == QueryForm::kFloats) {
    sc.qf.resize(static_cast<size_t>(head_dim * num_q));
  }
  for (int g = 0; g < num_q; ++g) {
    int8_t* qq = sc.qq.data() + g * head_dim;
    // Parenthesised: no argument-dependent lookup, so a path's copy finds its
    // own namespace's quantizer and the scalar path the plain one (kvlm::cpu).
    (quantize_act_q8_0)(qs[g], head_dim, ActQ8Out{qq, d, sums});
    for (int64_t b = 0; b < nb; ++b) sc.qd[b * num_q + g] = d[b];
    if constexpr (Kv::kQueryForm == QueryForm::kLanes) {
      // The key quants go as q + kKeyBias (unsigned), the query as it is, so
      // each block's sum comes out kKeyBias times the query block's quant sum
      // too high; the sums start that low. Four quants a 32-bit lane, in
      // memory order (the broadcasts read them so).
      for (int64_t j = 0; j < head_dim / 4; ++j) std::memcpy(&sc.q4[j * num_q + g], qq + 4 * j, 4);
      for (int64_t b = 0; b < nb; ++b) sc.qoff[b * num_q + g] = -Kv::kKeyBias * sums[b];
    } else if constexpr (Kv::kQueryForm == QueryForm::kFloats) {
      for (int64_t c = 0; c < head_dim; ++c) sc.qf[c * num_q + g] = qq[c];
    }
  }
}

// Scores of num_q heads, one slot at a time, its blocks in order: the
// plain chain, whose bits every vector path's lanes equal.
template <typename Kv>
void score_chain(const KvLayout& layout, const QuantScratch& sc, int num_q, float scale, float* const* rows) {
  const int64_t hd = layout.head_dim, nb = hd / kQuantBlock;
  for (const BlockPart& part : sc.parts) {
    for (int32_t o = part.o0; o < part.o1; ++o) {
      int8_t key[kMaxQ8Blocks * kQuantBlock];
      Kv::decode_key(layout, part.k, o, key);
      for (int g = 0; g < num_q; ++g) {
        const int8_t* qq = sc.qq.data() + g * hd;
        float acc = 0.f;
        for (int64_t b = 0; b < nb; ++b) {
          int32_t isum = 0;
          for (int64_t c = b * kQuantBlock; c < (b + 1) * kQuantBlock; ++c) isum += int32_t{qq[c]} * key[c];
          const float kd = load_scale(part.k + q8_key_scale_offset(layout, b, o));
          acc = madd(static_cast<float>(isum), sc.qd[b * num_q + g] * kd, acc);
        }
        rows[g][part.at + o] = acc * scale;
      }
    }
  }
}

#if KVLM_AVX2
// The scores of every key vector of a pass. On the avx2 path kept out of
// attend_quantized: inlined there, GCC kept Q8_0's avx2 integer sums (8
// heads) on the stack, and a 1,024-slot layer took 225 us against 160
// (bench_attention, one thread). On the avx512 path out of line cost 3-5%
// (Q8_0 and Q4_0, 1,024 and 4,096 slots), so it stays inline there.
#if defined(__AVX512F__)
#define KVLM_AVX2_OUT_OF_LINE
#else
#define KVLM_AVX2_OUT_OF_LINE [[gnu::noinline]]
#endif
template <typename Kv, int NumQ>
KVLM_AVX2_OUT_OF_LINE void score_all(const KvLayout& layout, std::span<const QuantKeyVec> vecs,
                                     const QuantScratch& sc, float scale, float* const* rows) {
  const size_t nv = vecs.size();
  for (size_t i = 0; i < nv; ++i)
    Kv::template score_vec<NumQ>(layout, vecs[i], vecs[std::min(i + Kv::kKeyPrefetchAhead, nv - 1)], sc, scale,
                                 rows);
}
#undef KVLM_AVX2_OUT_OF_LINE
#endif

template <typename Kv>
void score(const KvLayout& layout, QuantScratch& sc, int num_q, float scale, float* const* rows) {
#if KVLM_AVX2
  if (layout.block_size % kKeyVecSlots == 0) {
    const int64_t quants = q8_key_quants_offset(layout);
    sc.key_vecs.clear();
    for (const BlockPart& part : sc.parts)
      for (int32_t a = part.o0 / kKeyVecSlots * kKeyVecSlots; a < part.o1; a += kKeyVecSlots)
        sc.key_vecs.push_back({part.k + quants + 4 * a, part.k + 2 * a, part.at + a});
    with_num_q(num_q, [&]<int N>() { score_all<Kv, N>(layout, sc.key_vecs, sc, scale, rows); });
    return;
  }
#endif
  score_chain<Kv>(layout, sc, num_q, scale, rows);
}

#if KVLM_AVX2
// out[g][8 c .. 8 c + 8) += the weighted values of parts [b0, b1), in slot
// order, the heads' sums in registers across the slots (through memory, each
// slot's stores waited for the loads of the next).
template <typename Kv, int NumQ>
void accumulate_chunk(std::span<const BlockPart> parts, size_t b0, size_t b1, int64_t c, size_t row_bytes,
                      const float* const* w, float* const* out) {
  __m256 acc[NumQ];
  for (int g = 0; g < NumQ; ++g) acc[g] = _mm256_loadu_ps(out[g] + 8 * c);
  const size_t at = static_cast<size_t>(c / 4) * Kv::kRowBlockBytes;  // the chunk's block in a row
  const int j = static_cast<int>(c % 4);
  for (size_t b = b0; b < b1; ++b) {
    const BlockPart& part = parts[b];
    const uint8_t* pf = parts[std::min(b + kPrefetchAhead, parts.size() - 1)].v + at;
    for (int32_t o = part.o0; o < part.o1; ++o) {
      const uint8_t* blk = part.v + o * row_bytes + at;
      if constexpr (Kv::kPrefetchValues) _mm_prefetch(reinterpret_cast<const char*>(pf + o * row_bytes), _MM_HINT_T1);
      const __m256 v = Kv::dequantize8(blk, j, _mm256_set1_ps(load_scale(blk)));
      for (int g = 0; g < NumQ; ++g) acc[g] = _mm256_fmadd_ps(_mm256_set1_ps(w[g][part.at + o]), v, acc[g]);
    }
  }
  for (int g = 0; g < NumQ; ++g) _mm256_storeu_ps(out[g] + 8 * c, acc[g]);
}

// The value sums 8 dimensions a pass, kSpan blocks at a time.
template <typename Kv, int NumQ>
void accumulate_by_chunks(const KvLayout& layout, std::span<const BlockPart> parts, const float* const* w,
                          float* const* out) {
  constexpr size_t kSpan = 8;  // blocks whose values stay in L1 across the chunks
  for (size_t b0 = 0; b0 < parts.size(); b0 += kSpan) {
    const size_t b1 = std::min(parts.size(), b0 + kSpan);
    for (int64_t c = 0; c < layout.head_dim / 8; ++c)
      accumulate_chunk<Kv, NumQ>(parts, b0, b1, c, layout.row_bytes(), w, out);
  }
}
#else
// out[g] += the weighted values of every slot, in slot order, one block at
// a time: dequantized once, then added into each head's output.
template <typename Kv, int NumQ>
void accumulate_by_blocks(const KvLayout& layout, std::span<const BlockPart> parts, const float* const* w,
                          float* const* out) {
  const int64_t nb = layout.head_dim / kQuantBlock;
  const size_t row_bytes = layout.row_bytes();
  float vals[kQuantBlock];
  for (const BlockPart& part : parts) {
    for (int32_t o = part.o0; o < part.o1; ++o) {
      const uint8_t* row = part.v + o * row_bytes;
      for (int64_t b = 0; b < nb; ++b) {
        Kv::dequantize_block(row + b * Kv::kRowBlockBytes, vals);
        for (int g = 0; g < NumQ; ++g) {
          const float p = w[g][part.at + o];
          float* dst = out[g] + b * kQuantBlock;
          for (int64_t i = 0; i < kQuantBlock; ++i) dst[i] = madd(p, vals[i], dst[i]);
        }
      }
    }
  }
}
#endif

// out[g] += the weighted values of every slot of parts, in slot order.
template <typename Kv, int NumQ>
void accumulate_values(const KvLayout& layout, std::span<const BlockPart> parts, const float* const* w,
                       float* const* out) {
#if KVLM_AVX2
  if constexpr (Kv::kWideValueSums) {
    Kv::template accumulate_wide<NumQ>(layout, parts, w, out);
  } else {
    accumulate_by_chunks<Kv, NumQ>(layout, parts, w, out);
  }
#else
  accumulate_by_blocks<Kv, NumQ>(layout, parts, w, out);
#endif
}

// One query row, num_q heads of one GQA group, over Kv's storage: the
// pipeline attend_q8_0 and attend_q4_0 share (attention_parts.h).
template <typename Kv>
void attend_quantized(QuantScratch& sc, const KvLayout& layout, const KvLayer& layer, const AttentionSeq& seq,
                      int32_t kv_head, int64_t lo, int64_t hi, const float* const* qs, int num_q,
                      const AttentionParams& params, float* const* outs, float* stat_row) {
  const int64_t n = hi - lo;
  float* rows[kMaxGroupPass];
  make_score_rows(sc.scores, num_q, n, rows);
  collect_parts(layout, layer, seq, kv_head, lo, hi, sc.parts);
  quantize_queries<Kv>(qs, num_q, layout.head_dim, sc);
  score<Kv>(layout, sc, num_q, params.scale, rows);
  weigh_scores(rows, num_q, n, lo, params, stat_row, outs, layout.head_dim);
  with_num_q(num_q, [&]<int N>() { accumulate_values<Kv, N>(layout, sc.parts, rows, outs); });
}

}  // namespace
}  // namespace kvlm::cpu::KVLM_SIMD_NS
