// Attention over Q8_0 KV storage, compiled once per CPU path (ops_impl.h).
//
// Scores are integer dot products, as llama.cpp's attention computes them
// over Q8_0 keys: the query is quantized to Q8_0 (quantize_row, the keys'
// own rounding), each 32-dimension block of a score is an exact int32 sum of
// quant products, and the score adds the blocks in order in f32:
//   acc = fma(float(isum_b), qd_b * kd_b, acc),  score = acc * scale.
// Integer sums are exact in any order, so every path gives the same bits
// with whatever instructions it has; the avx512 path (which requires
// AVX512-VNNI, cpu_path.cpp) does 64 of those multiply-adds in one VPDPBUSD,
// against 16 in an f32 FMA, and reads half the bytes of F16 keys.
//
// Values are dequantized in place (scale times quant, rounded to f32) and
// summed over the slots in order with FMAs: the same sums as the F32 staging
// this file replaced, which dequantized every visible slot into a buffer
// first (measured 460-530 µs a layer at 4,096 tokens of TinyLlama's shape).
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

// KVLM_Q8_DOT: the avx512 path's VPDPBUSD kernels. KVLM_Q8_AVX2: the avx2
// path's (and the avxvnni path's, which runs it), whose integer sums are f32
// FMAs over integer-valued floats: every partial sum is an integer below
// 2^24 (32 products of at most 127 * 127), so each is exact, and the bits
// are VPDPBUSD's.
#if KVLM_AVX2 && defined(__AVX512F__)
#define KVLM_Q8_DOT 1
#define KVLM_Q8_AVX2 0
#elif KVLM_AVX2
#define KVLM_Q8_DOT 0
#define KVLM_Q8_AVX2 1
#else
#define KVLM_Q8_DOT 0
#define KVLM_Q8_AVX2 0
#endif

constexpr int64_t kQ8Block = 32;                        // dimensions per Q8_0 block
constexpr int64_t kQ8RowBlockBytes = sizeof(BlockQ8_0);  // fp16 scale, then 32 quants

// 16 consecutive slots of one Q8_0 K block: the quants of their first
// dimension group and the scales of their first Q8_0 block, and the
// score-row index of the first slot.
struct Q8KeyVec {
  const uint8_t* quants;
  const uint8_t* scales;
  int64_t at;
};

struct Q8Scratch {
  LocalVector<float> scores;  // score rows of one pass (make_score_rows)
  LocalVector<BlockPart> parts;
  LocalVector<Q8KeyVec> key_vecs;
  LocalVector<int8_t> qq;     // the queries' quants, [num_q][head_dim]
  LocalVector<float> qd;      // their scales, [head_dim / 32][num_q]
  LocalVector<uint32_t> q4;   // quants, four dimensions a lane, [head_dim / 4][num_q] (KVLM_Q8_DOT)
  LocalVector<int32_t> qoff;  // -128 times each block's quant sum, [head_dim / 32][num_q] (KVLM_Q8_DOT)
  LocalVector<float> qf;      // quants as f32, [head_dim][num_q] (KVLM_Q8_AVX2)
};

thread_local Q8Scratch t_q8;

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
void quantize_queries(const float* const* qs, int num_q, int64_t head_dim, Q8Scratch& sc) {
  const int64_t nb = head_dim / kQ8Block;
  float d[kMaxQ8Blocks];
  int32_t sums[kMaxQ8Blocks];
  sc.qq.resize(static_cast<size_t>(num_q * head_dim));
  sc.qd.resize(static_cast<size_t>(nb * num_q));
#if KVLM_Q8_DOT
  sc.q4.resize(static_cast<size_t>(head_dim / 4 * num_q));
  sc.qoff.resize(static_cast<size_t>(nb * num_q));
#elif KVLM_Q8_AVX2
  sc.qf.resize(static_cast<size_t>(head_dim * num_q));
#endif
  for (int g = 0; g < num_q; ++g) {
    int8_t* qq = sc.qq.data() + g * head_dim;
    // Parenthesised: no argument-dependent lookup, so a path's copy finds its
    // own namespace's quantizer and the scalar path the plain one (kvlm::cpu).
    (quantize_act_q8_0)(qs[g], head_dim, ActQ8Out{qq, d, sums});
    for (int64_t b = 0; b < nb; ++b) sc.qd[b * num_q + g] = d[b];
#if KVLM_Q8_DOT
    // VPDPBUSD multiplies unsigned by signed bytes: the keys go as quant +
    // 128 (0..255) and the query as it is, so each block's sum comes out 128
    // times the query block's quant sum too high; the sums start that low.
    // Four quants a 32-bit lane, in memory order (the broadcast reads them so).
    for (int64_t j = 0; j < head_dim / 4; ++j) std::memcpy(&sc.q4[j * num_q + g], qq + 4 * j, 4);
    for (int64_t b = 0; b < nb; ++b) sc.qoff[b * num_q + g] = -128 * sums[b];
#elif KVLM_Q8_AVX2
    for (int64_t c = 0; c < head_dim; ++c) sc.qf[c * num_q + g] = qq[c];
#endif
  }
}

// Scores one slot at a time: the integer sums in plain code, then the f32
// chain every path shares.
void score_chain(const KvLayout& layout, std::span<const BlockPart> parts, const Q8Scratch& sc, int num_q,
                 float scale, float* const* rows) {
  const int64_t hd = layout.head_dim, nb = hd / kQ8Block;
  for (const BlockPart& part : parts) {
    for (int32_t o = part.o0; o < part.o1; ++o) {
      int8_t key[kMaxQ8Blocks * kQ8Block];
      for (int64_t c = 0; c < hd; c += 4) std::memcpy(key + c, part.k + q8_key_quant_offset(layout, c, o), 4);
      for (int g = 0; g < num_q; ++g) {
        const int8_t* qq = sc.qq.data() + g * hd;
        float acc = 0.f;
        for (int64_t b = 0; b < nb; ++b) {
          int32_t isum = 0;
          for (int64_t c = b * kQ8Block; c < (b + 1) * kQ8Block; ++c) isum += int32_t{qq[c]} * key[c];
          const float kd = load_scale(part.k + q8_key_scale_offset(layout, b, o));
          acc = madd(static_cast<float>(isum), sc.qd[b * num_q + g] * kd, acc);
        }
        rows[g][part.at + o] = acc * scale;
      }
    }
  }
}

#if !KVLM_Q8_DOT && !KVLM_Q8_AVX2
// out[g][...] += the weighted values of every slot of parts, in order, one
// slot and one Q8_0 block at a time.
void accumulate_chain(const KvLayout& layout, std::span<const BlockPart> parts, const float* const* w, int num_q,
                      float* const* out) {
  const int64_t nb = layout.head_dim / kQ8Block;
  const size_t row_bytes = layout.row_bytes();
  float vals[kQ8Block];
  for (const BlockPart& part : parts) {
    for (int32_t o = part.o0; o < part.o1; ++o) {
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = part.v + o * row_bytes + b * kQ8RowBlockBytes;
        const float d = load_scale(blk);
        const auto* q = reinterpret_cast<const int8_t*>(blk + 2);
        for (int64_t i = 0; i < kQ8Block; ++i) vals[i] = d * static_cast<float>(q[i]);
        for (int g = 0; g < num_q; ++g) {
          const float p = w[g][part.at + o];
          float* dst = out[g] + b * kQ8Block;
          for (int64_t i = 0; i < kQ8Block; ++i) dst[i] = madd(p, vals[i], dst[i]);
        }
      }
    }
  }
}
#endif

#if KVLM_Q8_DOT
// ---- AVX512-VNNI: 16 slots a vector (scores), 16 dimensions (values) ----

// Scores of NumQ heads for one 16-slot key vector. pf: the vector to
// prefetch (kPrefetchAhead on), a line per dimension group. The query is
// the signed operand, so its four quants reach each VPDPBUSD as a broadcast
// from memory inside the instruction, and one flip of the key's sign bits
// serves every head (with the query as the unsigned operand, each head took
// a broadcast instruction and the keys' own sum another VPDPBUSD: the scores
// took ~68 us of a 4,096-slot layer against ~55 now, bench_attention on one
// thread, perf). Integer sums are exact: the bits are the same.
template <int NumQ>
void score_vec_q8(const KvLayout& layout, const Q8KeyVec& vec, const Q8KeyVec& pf, const Q8Scratch& sc, float scale,
                  float* const* rows) {
  const int64_t group_bytes = 4 * static_cast<int64_t>(layout.block_size);  // one dimension group of a block
  const int64_t scale_bytes = 2 * static_cast<int64_t>(layout.block_size);  // one Q8_0 block's scales
  const int64_t nb = layout.head_dim / kQ8Block;
  const __m512i sign = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[NumQ];
  for (int g = 0; g < NumQ; ++g) acc[g] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m512i isum[NumQ];
    for (int g = 0; g < NumQ; ++g) isum[g] = _mm512_set1_epi32(sc.qoff[b * NumQ + g]);
    _mm_prefetch(reinterpret_cast<const char*>(pf.scales + b * scale_bytes), _MM_HINT_T1);
    for (int64_t j = b * kQ8Block / 4; j < (b + 1) * kQ8Block / 4; ++j) {
      _mm_prefetch(reinterpret_cast<const char*>(pf.quants + j * group_bytes), _MM_HINT_T1);
      const __m512i k = _mm512_xor_si512(_mm512_loadu_si512(vec.quants + j * group_bytes), sign);  // quant + 128
      for (int g = 0; g < NumQ; ++g)
        isum[g] = simd::dpbusd_bcst(isum[g], k, &sc.q4[j * NumQ + g]);
    }
    const __m512 kd = _mm512_maskz_cvtph_ps(
        0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(vec.scales + b * scale_bytes)));
    for (int g = 0; g < NumQ; ++g) {
      const __m512 both = _mm512_mul_ps(kd, _mm512_set1_ps(sc.qd[b * NumQ + g]));
      acc[g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[g]), both, acc[g]);
    }
  }
  const __m512 sv = _mm512_set1_ps(scale);
  for (int g = 0; g < NumQ; ++g) _mm512_storeu_ps(rows[g] + vec.at, _mm512_mul_ps(acc[g], sv));
}

template <int NumQ>
void score_all_q8(const KvLayout& layout, std::span<const Q8KeyVec> vecs, const Q8Scratch& sc, float scale,
                  float* const* rows) {
  const size_t nv = vecs.size();
  for (size_t i = 0; i < nv; ++i)
    score_vec_q8<NumQ>(layout, vecs[i], vecs[std::min(i + kPrefetchAhead, nv - 1)], sc, scale, rows);
}

// The fp16 scale at p in all 16 lanes: a broadcast of the half and one
// conversion (the scalar conversion and its broadcast took a third
// instruction, and a false dependency on the register it inserted into).
inline __m512 broadcast_scale16(const uint8_t* p) {
  int16_t h;
  std::memcpy(&h, p, sizeof(h));
  return _mm512_cvtph_ps(_mm256_set1_epi16(h));
}

// 16 quants from p, as f32 times d: dequantize_row's product.
inline __m512 dequantize16(const uint8_t* p, __m512 d) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)));
}

// out[g][32 blk .. 32 blk + 32) += the weighted values of parts [b0, b1), in
// slot order: one Q8_0 block of every row, two 16-dimension vectors.
template <int NumQ>
void accumulate_block_q8(std::span<const BlockPart> parts, size_t b0, size_t b1, int64_t blk, size_t row_bytes,
                         const float* const* w, float* const* out) {
  __m512 acc[2][NumQ];
  for (int j = 0; j < 2; ++j)
    for (int g = 0; g < NumQ; ++g) acc[j][g] = _mm512_loadu_ps(out[g] + kQ8Block * blk + 16 * j);
  const size_t chunk = static_cast<size_t>(blk) * kQ8RowBlockBytes;
  for (size_t b = b0; b < b1; ++b) {
    const BlockPart& part = parts[b];
    const uint8_t* pf = parts[std::min(b + kPrefetchAhead, parts.size() - 1)].v + chunk;
    for (int32_t o = part.o0; o < part.o1; ++o) {
      const uint8_t* row = part.v + o * row_bytes + chunk;
      _mm_prefetch(reinterpret_cast<const char*>(pf + o * row_bytes), _MM_HINT_T1);
      const __m512 d = broadcast_scale16(row);
      const __m512 v0 = dequantize16(row + 2, d), v1 = dequantize16(row + 18, d);
      for (int g = 0; g < NumQ; ++g) {
        const __m512 pb = _mm512_set1_ps(w[g][part.at + o]);
        acc[0][g] = _mm512_fmadd_ps(pb, v0, acc[0][g]);
        acc[1][g] = _mm512_fmadd_ps(pb, v1, acc[1][g]);
      }
    }
  }
  for (int j = 0; j < 2; ++j)
    for (int g = 0; g < NumQ; ++g) _mm512_storeu_ps(out[g] + kQ8Block * blk + 16 * j, acc[j][g]);
}

template <int NumQ>
void accumulate_all_q8(const KvLayout& layout, std::span<const BlockPart> parts, const float* const* w,
                       float* const* out) {
  constexpr size_t kSpan = 8;  // blocks whose values (8.5 KiB at TinyLlama's shape) stay in L1 across the Q8_0 blocks
  const int64_t nb = layout.head_dim / kQ8Block;
  for (size_t b0 = 0; b0 < parts.size(); b0 += kSpan) {
    const size_t b1 = std::min(parts.size(), b0 + kSpan);
    for (int64_t blk = 0; blk < nb; ++blk) accumulate_block_q8<NumQ>(parts, b0, b1, blk, layout.row_bytes(), w, out);
  }
}
#endif  // KVLM_Q8_DOT

#if KVLM_Q8_AVX2
// ---- AVX2: 8 slots a vector (scores), 8 dimensions (values) ----

// Scores of NumQ heads for one 8-slot key vector: a load of a dimension
// group holds 4 dimensions of each slot, one byte per dimension in each
// lane; shifting a byte to the top and back (arithmetic) sign-extends it.
template <int NumQ>
void score_vec8_q8(const KvLayout& layout, const Q8KeyVec& vec, const Q8KeyVec& pf, const Q8Scratch& sc, float scale,
                   float* const* rows) {
  const int64_t group_bytes = 4 * static_cast<int64_t>(layout.block_size);
  const int64_t scale_bytes = 2 * static_cast<int64_t>(layout.block_size);
  const int64_t nb = layout.head_dim / kQ8Block;
  __m256 acc[NumQ];
  for (int g = 0; g < NumQ; ++g) acc[g] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m256 isum[NumQ];
    for (int g = 0; g < NumQ; ++g) isum[g] = _mm256_setzero_ps();
    for (int64_t j = b * kQ8Block / 4; j < (b + 1) * kQ8Block / 4; ++j) {
      _mm_prefetch(reinterpret_cast<const char*>(pf.quants + j * group_bytes), _MM_HINT_T1);
      const __m256i k4 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(vec.quants + j * group_bytes));
      const __m256i dims[4] = {_mm256_srai_epi32(_mm256_slli_epi32(k4, 24), 24),
                               _mm256_srai_epi32(_mm256_slli_epi32(k4, 16), 24),
                               _mm256_srai_epi32(_mm256_slli_epi32(k4, 8), 24), _mm256_srai_epi32(k4, 24)};
      for (int d = 0; d < 4; ++d) {
        const __m256 k = _mm256_cvtepi32_ps(dims[d]);
        const float* qf = sc.qf.data() + (4 * j + d) * NumQ;
        for (int g = 0; g < NumQ; ++g) isum[g] = _mm256_fmadd_ps(_mm256_set1_ps(qf[g]), k, isum[g]);
      }
    }
    const __m256 kd =
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(vec.scales + b * scale_bytes)));
    for (int g = 0; g < NumQ; ++g)
      acc[g] = _mm256_fmadd_ps(isum[g], _mm256_mul_ps(kd, _mm256_set1_ps(sc.qd[b * NumQ + g])), acc[g]);
  }
  const __m256 sv = _mm256_set1_ps(scale);
  for (int g = 0; g < NumQ; ++g) _mm256_storeu_ps(rows[g] + vec.at, _mm256_mul_ps(acc[g], sv));
}

template <int NumQ>
void score_all8_q8(const KvLayout& layout, std::span<const Q8KeyVec> vecs, const Q8Scratch& sc, float scale,
                   float* const* rows) {
  const size_t nv = vecs.size();
  for (size_t i = 0; i < nv; ++i)
    score_vec8_q8<NumQ>(layout, vecs[i], vecs[std::min(i + 2 * kPrefetchAhead, nv - 1)], sc, scale, rows);
}

// out[g][c .. c + 8) += the weighted values of parts [b0, b1), in slot order.
template <int NumQ>
void accumulate8_q8(std::span<const BlockPart> parts, size_t b0, size_t b1, int64_t c, size_t row_bytes,
                    const float* const* w, float* const* out) {
  __m256 acc[NumQ];
  for (int g = 0; g < NumQ; ++g) acc[g] = _mm256_loadu_ps(out[g] + c);
  const size_t at = static_cast<size_t>(c / kQ8Block) * kQ8RowBlockBytes;  // c's Q8_0 block in a row
  const int64_t in_block = c % kQ8Block;
  for (size_t b = b0; b < b1; ++b) {
    const BlockPart& part = parts[b];
    const uint8_t* pf = parts[std::min(b + kPrefetchAhead, parts.size() - 1)].v + at;
    for (int32_t o = part.o0; o < part.o1; ++o) {
      const uint8_t* blk = part.v + o * row_bytes + at;
      _mm_prefetch(reinterpret_cast<const char*>(pf + o * row_bytes), _MM_HINT_T1);
      const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + 2 + in_block));
      const __m256 v = _mm256_mul_ps(_mm256_set1_ps(load_scale(blk)), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
      for (int g = 0; g < NumQ; ++g) acc[g] = _mm256_fmadd_ps(_mm256_set1_ps(w[g][part.at + o]), v, acc[g]);
    }
  }
  for (int g = 0; g < NumQ; ++g) _mm256_storeu_ps(out[g] + c, acc[g]);
}

template <int NumQ>
void accumulate_all8_q8(const KvLayout& layout, std::span<const BlockPart> parts, const float* const* w,
                        float* const* out) {
  constexpr size_t kSpan = 8;  // blocks whose values stay in L1 across the dimension chunks
  for (size_t b0 = 0; b0 < parts.size(); b0 += kSpan) {
    const size_t b1 = std::min(parts.size(), b0 + kSpan);
    for (int64_t c = 0; c < layout.head_dim; c += 8)
      accumulate8_q8<NumQ>(parts, b0, b1, c, layout.row_bytes(), w, out);
  }
}
#endif  // KVLM_Q8_AVX2

#if KVLM_Q8_DOT || KVLM_Q8_AVX2
constexpr int32_t kKeyVecSlots = KVLM_Q8_DOT ? 16 : 8;  // slots per key vector of this path's kernel
#endif

void score(const KvLayout& layout, Q8Scratch& sc, int num_q, float scale, float* const* rows) {
#if KVLM_Q8_DOT || KVLM_Q8_AVX2
  if (layout.block_size % kKeyVecSlots != 0) {  // no whole key vectors
#endif
    score_chain(layout, sc.parts, sc, num_q, scale, rows);
    return;
#if KVLM_Q8_DOT || KVLM_Q8_AVX2
  }
  const int64_t quants = q8_key_quants_offset(layout);
  sc.key_vecs.clear();
  for (const BlockPart& part : sc.parts)
    for (int32_t a = part.o0 / kKeyVecSlots * kKeyVecSlots; a < part.o1; a += kKeyVecSlots)
      sc.key_vecs.push_back({part.k + quants + 4 * a, part.k + 2 * a, part.at + a});
#if KVLM_Q8_DOT
  with_num_q(num_q, [&]<int N>() { score_all_q8<N>(layout, sc.key_vecs, sc, scale, rows); });
#else
  with_num_q(num_q, [&]<int N>() { score_all8_q8<N>(layout, sc.key_vecs, sc, scale, rows); });
#endif
#endif
}

void accumulate(const KvLayout& layout, const Q8Scratch& sc, const float* const* rows, int num_q, float* const* outs) {
#if KVLM_Q8_DOT
  with_num_q(num_q, [&]<int N>() { accumulate_all_q8<N>(layout, sc.parts, rows, outs); });
#elif KVLM_Q8_AVX2
  with_num_q(num_q, [&]<int N>() { accumulate_all8_q8<N>(layout, sc.parts, rows, outs); });
#else
  accumulate_chain(layout, sc.parts, rows, num_q, outs);
#endif
}

}  // namespace

void attend_q8_0(const KvLayout& layout, const KvLayer& layer, const AttentionSeq& seq, int32_t kv_head, int64_t lo,
                 int64_t hi, const float* const* qs, int num_q, const AttentionParams& params, float* const* outs,
                 float* stat_row) {
  Q8Scratch& sc = t_q8;
  const int64_t n = hi - lo;
  float* rows[kMaxGroupPass];
  make_score_rows(sc.scores, num_q, n, rows);
  collect_parts(layout, layer, seq, kv_head, lo, hi, sc.parts);
  quantize_queries(qs, num_q, layout.head_dim, sc);
  score(layout, sc, num_q, params.scale, rows);
  weigh_scores(rows, num_q, n, lo, params, stat_row, outs, layout.head_dim);
  accumulate(layout, sc, rows, num_q, outs);
}

}  // namespace kvlm::cpu::KVLM_SIMD_NS
