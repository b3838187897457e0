// Attention over Q4_0 KV storage, compiled once per CPU path (ops_impl.h).
//
// Keys and values are Q4_0 rows (attention.h, KvLayout): 32 dimensions a
// block, an fp16 scale and 16 bytes of 4-bit quants, value = d * (q - 8).
// Scores are integer dot products, as llama.cpp's vec_dot_q4_0_q8_0 takes
// them: the query is quantized to Q8_0 (the matmuls' activation quantizer,
// quantize_row's bits), and each 32-dimension block's sum
//   isum = sum_i qq[i] * q[i] - 8 * sum_i qq[i]
// is an exact int32, whatever the order; a score adds the blocks in order in
// f32, acc = fma(float(isum), qd * kd, acc), so every path gives the same
// bits. Values are dequantized in place (d * (q - 8), exact in f32) and summed
// over the slots in order with FMAs, as the Q8_0 kernel does.
//
// A key block is unpacked once per slot for all the query heads of a GQA
// group; the AVX2 path (and the avx512 path, which runs it) multiplies the 32
// unsigned quants by the query's signed ones 32 at a time (VPMADDUBSW: pairs
// summed into int16, at most 2 * 15 * 127, so exact).
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

struct Q4Scratch {
  LocalVector<float> scores;  // score rows of one pass (make_score_rows)
  LocalVector<BlockPart> parts;
  LocalVector<int8_t> qq;      // the queries' quants, [num_q][head_dim]
  LocalVector<float> qd;       // their scales, [num_q][head_dim / 32]
  LocalVector<int32_t> qoff;   // -8 times each block's quant sum, [num_q][head_dim / 32]
  LocalVector<float> qd_lanes;      // qd as [head_dim / 32][8]: a block's heads in the lanes (score_lanes)
  LocalVector<int32_t> qoff_lanes;  // qoff as the same
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
  sc.qd.resize(static_cast<size_t>(num_q * nb));
  sc.qoff.resize(static_cast<size_t>(num_q * nb));
  for (int g = 0; g < num_q; ++g) {
    int32_t sums[kMaxQ8Blocks];
    // Parenthesised: no argument-dependent lookup (attention_q8_0.cpp).
    (quantize_act_q8_0)(qs[g], head_dim, ActQ8Out{sc.qq.data() + g * head_dim, sc.qd.data() + g * nb, sums});
    for (int64_t b = 0; b < nb; ++b) sc.qoff[g * nb + b] = -8 * sums[b];
  }
}

// The 32 quants of one Q4_0 block, 0..15, in dimension order: the low
// nibbles are dimensions 0..15, the high ones 16..31.
inline void unpack_block(const uint8_t* qs, uint8_t* out) {
  for (int i = 0; i < 16; ++i) {
    out[i] = qs[i] & 15;
    out[i + 16] = qs[i] >> 4;
  }
}

#if !KVLM_AVX2
// Scores of num_q heads, one slot at a time, its blocks in order: the
// plain chain, whose bits the vector paths' lanes equal.
void score_chain(const KvLayout& layout, const Q4Scratch& sc, int num_q, float scale, float* const* rows) {
  const int64_t hd = layout.head_dim, nb = hd / kQ4Block;
  const size_t row_bytes = layout.row_bytes();
  uint8_t k[kQ4Block];
  for (const BlockPart& part : sc.parts) {
    for (int32_t o = part.o0; o < part.o1; ++o) {
      const uint8_t* key = part.k + o * row_bytes;
      float acc[kMaxGroupPass] = {};
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = key + b * kQ4BlockBytes;
        const float kd = load_scale(blk);
        unpack_block(blk + 2, k);
        for (int g = 0; g < num_q; ++g) {
          const int8_t* a = sc.qq.data() + g * hd + b * kQ4Block;
          int32_t isum = sc.qoff[g * nb + b];
          for (int64_t i = 0; i < kQ4Block; ++i) isum += int32_t{a[i]} * int32_t{k[i]};
          acc[g] = madd(static_cast<float>(isum), sc.qd[g * nb + b] * kd, acc[g]);
        }
      }
      for (int g = 0; g < num_q; ++g) rows[g][part.at + o] = acc[g] * scale;
    }
  }
}
#endif

#if KVLM_AVX2
// The same with the heads in the lanes of one vector: a key block is
// unpacked once, each head's 32 products summed in int16 pairs (VPMADDUBSW,
// unsigned key quants times signed query ones: at most 2 * 15 * 127, exact)
// and int32 quads, and the eight heads' quads reduced together by three
// rounds of horizontal adds, so lane g holds head g's integer sum. Lane g's
// f32 chain is score_chain's: the same bits.
template <int NumQ>
void score_lanes(const KvLayout& layout, const Q4Scratch& sc, float scale, float* const* rows) {
  const int64_t hd = layout.head_dim, nb = hd / kQ4Block;
  const size_t row_bytes = layout.row_bytes();
  const __m128i lo_mask = _mm_set1_epi8(15);
  const __m256i ones = _mm256_set1_epi16(1);
  alignas(32) float lanes[8];
  for (const BlockPart& part : sc.parts) {
    for (int32_t o = part.o0; o < part.o1; ++o) {
      const uint8_t* key = part.k + o * row_bytes;
      __m256 acc = _mm256_setzero_ps();
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = key + b * kQ4BlockBytes;
        const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
        const __m256i k = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(packed, 4), lo_mask), _mm_and_si128(packed, lo_mask));
        __m256i v[8];
        for (int g = 0; g < 8; ++g) {
          if (g >= NumQ) {
            v[g] = _mm256_setzero_si256();
            continue;
          }
          const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sc.qq.data() + g * hd + b * kQ4Block));
          v[g] = _mm256_madd_epi16(_mm256_maddubs_epi16(k, q), ones);
        }
        const __m256i c = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
        const __m256i d = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
        __m256i isum = _mm256_add_epi32(_mm256_permute2x128_si256(c, d, 0x20), _mm256_permute2x128_si256(c, d, 0x31));
        isum = _mm256_add_epi32(isum, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(&sc.qoff_lanes[b * 8])));
        const __m256 qd = _mm256_loadu_ps(&sc.qd_lanes[b * 8]);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(qd, _mm256_set1_ps(load_scale(blk))), acc);
      }
      _mm256_store_ps(lanes, _mm256_mul_ps(acc, _mm256_set1_ps(scale)));
      for (int g = 0; g < NumQ; ++g) rows[g][part.at + o] = lanes[g];
    }
  }
}
#endif

void score(const KvLayout& layout, Q4Scratch& sc, int num_q, float scale, float* const* rows) {
#if KVLM_AVX2
  const int64_t nb = layout.head_dim / kQ4Block;
  sc.qd_lanes.assign(static_cast<size_t>(nb * 8), 0.f);
  sc.qoff_lanes.assign(static_cast<size_t>(nb * 8), 0);
  for (int g = 0; g < num_q; ++g)
    for (int64_t b = 0; b < nb; ++b) {
      sc.qd_lanes[b * 8 + g] = sc.qd[g * nb + b];
      sc.qoff_lanes[b * 8 + g] = sc.qoff[g * nb + b];
    }
  with_num_q(num_q, [&]<int N>() { score_lanes<N>(layout, sc, scale, rows); });
#else
  score_chain(layout, sc, num_q, scale, rows);
#endif
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
