// Attention over Q4_0 KV storage, compiled once per CPU path (ops_impl.h).
//
// Keys are Q4_0 blocks laid out in lanes (attention.h, KvLayout): each
// slot's eight dimensions 8j .. 8j + 7 in one 32-bit lane, 16 slots side by
// side. Scores are integer dot products, as llama.cpp's vec_dot_q4_0_q8_0
// takes them: the query is quantized to Q8_0 (the matmuls' activation
// quantizer, quantize_row's bits), and each 32-dimension block's sum
//   isum = sum_i qq[i] * q[i] - 8 * sum_i qq[i]      (q: the 4-bit quant, 0..15)
// is an exact int32 whatever the order; a score adds the blocks in order in
// f32, acc = fma(float(isum), qd * kd, acc), so every path gives the same
// bits. A lane masked (low nibbles) or shifted (high ones) is four quants of
// four dimensions, as VPDPBUSD (avx512 path, 16 slots a vector) or
// VPMADDUBSW and VPMADDWD (avx2 path, 8 slots) take them with the query's
// four quants broadcast: no per-slot reduction. Values are Q4_0 rows,
// dequantized in place (d * (q - 8), exact in f32) and summed over the slots
// in order with FMAs, the heads' sums in registers across the slots.
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
#include "backend/fp16.h"
#include "backend/quant.h"

namespace kvlm::cpu::KVLM_SIMD_NS {
namespace {

constexpr int64_t kQ4Block = 32;                       // dimensions per Q4_0 block
constexpr int64_t kQ4BlockBytes = sizeof(BlockQ4_0);  // fp16 scale, then 16 bytes of quants

// 16 (avx512) or 8 (avx2) consecutive slots of one K block: their first
// lane and first scale, and the score-row index of the first slot.
struct Q4KeyVec {
  const uint8_t* lanes;
  const uint8_t* scales;
  int64_t at;
};

struct Q4Scratch {
  LocalVector<float> scores;  // score rows of one pass (make_score_rows)
  LocalVector<BlockPart> parts;
  LocalVector<Q4KeyVec> key_vecs;
  LocalVector<int8_t> qq;      // the queries' quants, [num_q][head_dim]
  LocalVector<uint32_t> q4;    // the same four a lane, [head_dim / 4][num_q]
  LocalVector<float> qd;       // their scales, [head_dim / 32][num_q]
  LocalVector<int32_t> qoff;   // -8 times each block's quant sum, [head_dim / 32][num_q]
};

thread_local Q4Scratch t_q4;

inline float load_scale(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof(h));
  return simd::half_to_float(h);
}

// The queries quantized as the matmuls quantize activations (quantize_row's
// quants and fp16-rounded scales), with each block's quant sum.
void quantize_queries(const float* const* qs, int num_q, int64_t head_dim, Q4Scratch& sc) {
  const int64_t nb = head_dim / kQ4Block;
  sc.qq.resize(static_cast<size_t>(num_q * head_dim));
  sc.q4.resize(static_cast<size_t>(head_dim / 4 * num_q));
  sc.qd.resize(static_cast<size_t>(nb * num_q));
  sc.qoff.resize(static_cast<size_t>(nb * num_q));
  for (int g = 0; g < num_q; ++g) {
    int8_t* qq = sc.qq.data() + g * head_dim;
    float d[kMaxQ8Blocks];
    int32_t sums[kMaxQ8Blocks];
    // Parenthesised: no argument-dependent lookup (attention_q8_0.cpp).
    (quantize_act_q8_0)(qs[g], head_dim, ActQ8Out{qq, d, sums});
    for (int64_t b = 0; b < nb; ++b) sc.qd[b * num_q + g] = d[b], sc.qoff[b * num_q + g] = -8 * sums[b];
    for (int64_t j = 0; j < head_dim / 4; ++j) std::memcpy(&sc.q4[j * num_q + g], qq + 4 * j, 4);
  }
}

// The 32 quants of one Q4_0 block, 0..15, in dimension order: the low
// nibbles are dimensions 0..15, the high ones 16..31.
[[maybe_unused]] inline void unpack_block(const uint8_t* qs, uint8_t* out) {
  for (int i = 0; i < 16; ++i) {
    out[i] = qs[i] & 15;
    out[i + 16] = qs[i] >> 4;
  }
}

// Slot o's quant of dimension c from its lane (attention.h, KvLayout).
inline int32_t key_quant(const KvLayout& layout, const uint8_t* kb, int64_t c, int32_t o) {
  const uint8_t byte = kb[q4_key_lane_offset(layout, c / 8, o) + c % 4];
  return c % 8 < 4 ? byte & 15 : byte >> 4;
}

// Scores of num_q heads, one slot at a time, its blocks in order: the
// plain chain, whose bits every vector path's lanes equal.
void score_chain(const KvLayout& layout, const Q4Scratch& sc, int num_q, float scale, float* const* rows) {
  const int64_t hd = layout.head_dim, nb = hd / kQ4Block;
  for (const BlockPart& part : sc.parts) {
    for (int32_t o = part.o0; o < part.o1; ++o) {
      int32_t k[kMaxQ8Blocks * kQ4Block];
      for (int64_t c = 0; c < hd; ++c) k[c] = key_quant(layout, part.k, c, o);
      for (int g = 0; g < num_q; ++g) {
        const int8_t* a = sc.qq.data() + g * hd;
        float acc = 0.f;
        for (int64_t b = 0; b < nb; ++b) {
          int32_t isum = sc.qoff[b * num_q + g];
          for (int64_t c = b * kQ4Block; c < (b + 1) * kQ4Block; ++c) isum += int32_t{a[c]} * k[c];
          const float kd = load_scale(part.k + q8_key_scale_offset(layout, b, o));
          acc = madd(static_cast<float>(isum), sc.qd[b * num_q + g] * kd, acc);
        }
        rows[g][part.at + o] = acc * scale;
      }
    }
  }
}

#if KVLM_AVX2 && defined(__AVX512F__)
// ---- AVX512-VNNI: 16 slots a vector ----
constexpr int32_t kKeyVecSlots = 16;

// Scores of NumQ heads for one 16-slot key vector. The key quants (0..15)
// are VPDPBUSD's unsigned operand as they are; the query's four quants its
// signed one, broadcast from memory inside the instruction.
template <int NumQ>
void score_vec(const KvLayout& layout, const Q4KeyVec& vec, const Q4KeyVec& pf, const Q4Scratch& sc, float scale,
               float* const* rows) {
  const int64_t lane_bytes = 4 * static_cast<int64_t>(layout.block_size);   // one lane group of a block
  const int64_t scale_bytes = 2 * static_cast<int64_t>(layout.block_size);  // one Q4_0 block's scales
  const int64_t nb = layout.head_dim / kQ4Block;
  const __m512i low = _mm512_set1_epi8(15);
  __m512 acc[NumQ];
  for (int g = 0; g < NumQ; ++g) acc[g] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m512i isum[NumQ];
    for (int g = 0; g < NumQ; ++g) isum[g] = _mm512_set1_epi32(sc.qoff[b * NumQ + g]);
    for (int64_t j = 4 * b; j < 4 * b + 4; ++j) {
      _mm_prefetch(reinterpret_cast<const char*>(pf.lanes + j * lane_bytes), _MM_HINT_T1);
      const __m512i v = _mm512_loadu_si512(vec.lanes + j * lane_bytes);
      const __m512i lo = _mm512_and_si512(v, low), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
      for (int g = 0; g < NumQ; ++g) {
        isum[g] = simd::dpbusd_bcst(isum[g], lo, &sc.q4[(2 * j) * NumQ + g]);
        isum[g] = simd::dpbusd_bcst(isum[g], hi, &sc.q4[(2 * j + 1) * NumQ + g]);
      }
    }
    const __m512 kd = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(vec.scales + b * scale_bytes)));
    for (int g = 0; g < NumQ; ++g)
      acc[g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[g]), _mm512_mul_ps(kd, _mm512_set1_ps(sc.qd[b * NumQ + g])), acc[g]);
  }
  const __m512 sv = _mm512_set1_ps(scale);
  for (int g = 0; g < NumQ; ++g) _mm512_storeu_ps(rows[g] + vec.at, _mm512_mul_ps(acc[g], sv));
}
#elif KVLM_AVX2
// ---- AVX2: 8 slots a vector ----
constexpr int32_t kKeyVecSlots = 8;

// VPMADDUBSW multiplies the key quants (unsigned) by the query's (signed)
// and adds pairs into int16 (at most 2 * 15 * 127: exact), VPMADDWD the
// pairs into one int32 a slot.
template <int NumQ>
void score_vec(const KvLayout& layout, const Q4KeyVec& vec, const Q4KeyVec& pf, const Q4Scratch& sc, float scale,
               float* const* rows) {
  const int64_t lane_bytes = 4 * static_cast<int64_t>(layout.block_size);
  const int64_t scale_bytes = 2 * static_cast<int64_t>(layout.block_size);
  const int64_t nb = layout.head_dim / kQ4Block;
  const __m256i low = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
  __m256 acc[NumQ];
  for (int g = 0; g < NumQ; ++g) acc[g] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m256i isum[NumQ];
    for (int g = 0; g < NumQ; ++g) isum[g] = _mm256_set1_epi32(sc.qoff[b * NumQ + g]);
    for (int64_t j = 4 * b; j < 4 * b + 4; ++j) {
      _mm_prefetch(reinterpret_cast<const char*>(pf.lanes + j * lane_bytes), _MM_HINT_T1);
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(vec.lanes + j * lane_bytes));
      const __m256i lo = _mm256_and_si256(v, low), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
      for (int g = 0; g < NumQ; ++g) {
        const __m256i qlo = _mm256_set1_epi32(static_cast<int32_t>(sc.q4[(2 * j) * NumQ + g]));
        const __m256i qhi = _mm256_set1_epi32(static_cast<int32_t>(sc.q4[(2 * j + 1) * NumQ + g]));
        const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(lo, qlo), _mm256_maddubs_epi16(hi, qhi));
        isum[g] = _mm256_add_epi32(isum[g], _mm256_madd_epi16(pairs, ones));
      }
    }
    const __m256 kd = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(vec.scales + b * scale_bytes)));
    for (int g = 0; g < NumQ; ++g)
      acc[g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[g]), _mm256_mul_ps(kd, _mm256_set1_ps(sc.qd[b * NumQ + g])), acc[g]);
  }
  const __m256 sv = _mm256_set1_ps(scale);
  for (int g = 0; g < NumQ; ++g) _mm256_storeu_ps(rows[g] + vec.at, _mm256_mul_ps(acc[g], sv));
}
#endif

#if KVLM_AVX2
template <int NumQ>
void score_all(const KvLayout& layout, std::span<const Q4KeyVec> vecs, const Q4Scratch& sc, float scale,
               float* const* rows) {
  const size_t nv = vecs.size();
  for (size_t i = 0; i < nv; ++i)
    score_vec<NumQ>(layout, vecs[i], vecs[std::min(i + kPrefetchAhead, nv - 1)], sc, scale, rows);
}
#endif

void score(const KvLayout& layout, Q4Scratch& sc, int num_q, float scale, float* const* rows) {
#if KVLM_AVX2
  if (layout.block_size % kKeyVecSlots == 0) {
    const int64_t lanes = q8_key_quants_offset(layout);
    sc.key_vecs.clear();
    for (const BlockPart& part : sc.parts)
      for (int32_t a = part.o0 / kKeyVecSlots * kKeyVecSlots; a < part.o1; a += kKeyVecSlots)
        sc.key_vecs.push_back({part.k + lanes + 4 * a, part.k + 2 * a, part.at + a});
    with_num_q(num_q, [&]<int N>() { score_all<N>(layout, sc.key_vecs, sc, scale, rows); });
    return;
  }
#endif
  score_chain(layout, sc, num_q, scale, rows);
}

#if KVLM_AVX2
// d * (q - 8) of the 8 dimensions 8 j .. 8 j + 7 of one Q4_0 block: chunks 0
// and 1 are the low nibbles of bytes 0..7 and 8..15, chunks 2 and 3 the high
// ones.
inline __m256 dequantize_chunk(const uint8_t* blk, int j, __m256 d) {
  const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + 2 + 8 * (j & 1)));
  const __m128i nibbles = _mm_and_si128(j < 2 ? bytes : _mm_srli_epi16(bytes, 4), _mm_set1_epi8(15));
  const __m256i q = _mm256_sub_epi32(_mm256_cvtepu8_epi32(nibbles), _mm256_set1_epi32(8));
  return _mm256_mul_ps(d, _mm256_cvtepi32_ps(q));
}

// out[g][8 c .. 8 c + 8) += the weighted values of parts [b0, b1), in slot
// order, the heads' sums in registers across the slots (through memory, each
// slot's stores waited for the loads of the next).
template <int NumQ>
void accumulate_chunk(std::span<const BlockPart> parts, size_t b0, size_t b1, int64_t c, size_t row_bytes,
                      const float* const* w, float* const* out) {
  __m256 acc[NumQ];
  for (int g = 0; g < NumQ; ++g) acc[g] = _mm256_loadu_ps(out[g] + 8 * c);
  const size_t at = static_cast<size_t>(c / 4) * kQ4BlockBytes;  // the chunk's Q4_0 block in a row
  const int j = static_cast<int>(c % 4);
  for (size_t b = b0; b < b1; ++b) {
    const BlockPart& part = parts[b];
    for (int32_t o = part.o0; o < part.o1; ++o) {
      const uint8_t* blk = part.v + o * row_bytes + at;
      const __m256 v = dequantize_chunk(blk, j, _mm256_set1_ps(load_scale(blk)));
      for (int g = 0; g < NumQ; ++g) acc[g] = _mm256_fmadd_ps(_mm256_set1_ps(w[g][part.at + o]), v, acc[g]);
    }
  }
  for (int g = 0; g < NumQ; ++g) _mm256_storeu_ps(out[g] + 8 * c, acc[g]);
}

template <int NumQ>
void accumulate_all(const KvLayout& layout, std::span<const BlockPart> parts, const float* const* w,
                    float* const* out) {
  constexpr size_t kSpan = 8;  // blocks whose values stay in L1 across the chunks
  for (size_t b0 = 0; b0 < parts.size(); b0 += kSpan) {
    const size_t b1 = std::min(parts.size(), b0 + kSpan);
    for (int64_t c = 0; c < layout.head_dim / 8; ++c)
      accumulate_chunk<NumQ>(parts, b0, b1, c, layout.row_bytes(), w, out);
  }
}
#else
// out[g] += the weighted values of every slot, in slot order, one Q4_0
// block at a time: dequantized once, then added into each head's output.
template <int NumQ>
void accumulate_all(const KvLayout& layout, std::span<const BlockPart> parts, const float* const* w,
                    float* const* out) {
  const int64_t nb = layout.head_dim / kQ4Block;
  const size_t row_bytes = layout.row_bytes();
  uint8_t quants[kQ4Block];
  float vals[kQ4Block];
  for (const BlockPart& part : parts) {
    for (int32_t o = part.o0; o < part.o1; ++o) {
      const uint8_t* row = part.v + o * row_bytes;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = row + b * kQ4BlockBytes;
        const float d = load_scale(blk);
        unpack_block(blk + 2, quants);
        for (int64_t i = 0; i < kQ4Block; ++i) vals[i] = d * static_cast<float>(int32_t{quants[i]} - 8);
        for (int g = 0; g < NumQ; ++g) {
          const float p = w[g][part.at + o];
          float* dst = out[g] + b * kQ4Block;
          for (int64_t i = 0; i < kQ4Block; ++i) dst[i] = madd(p, vals[i], dst[i]);
        }
      }
    }
  }
}
#endif

}  // namespace

void attend_q4_0(const KvLayout& layout, const KvLayer& layer, const AttentionSeq& seq, int32_t kv_head, int64_t lo,
                 int64_t hi, const float* const* qs, int num_q, const AttentionParams& params, float* const* outs,
                 float* stat_row) {
  Q4Scratch& sc = t_q4;
  const int64_t n = hi - lo;
  float* rows[kMaxGroupPass];
  make_score_rows(sc.scores, num_q, n, rows);
  collect_parts(layout, layer, seq, kv_head, lo, hi, sc.parts);
  quantize_queries(qs, num_q, layout.head_dim, sc);
  score(layout, sc, num_q, params.scale, rows);
  weigh_scores(rows, num_q, n, lo, params, stat_row, outs, layout.head_dim);
  with_num_q(num_q, [&]<int N>() { accumulate_all<N>(layout, sc.parts, rows, outs); });
}

}  // namespace kvlm::cpu::KVLM_SIMD_NS
