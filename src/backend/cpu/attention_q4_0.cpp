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
//
// The pipeline around these is attention_quantized.h's, shared with Q8_0;
// this file holds what Q4_0 does its own way: the key lanes' score kernels
// and the nibble decoding (Q4Kv).
#include <cstdint>
#include <span>

#include "backend/cpu/attention_quantized.h"
#include "backend/quant.h"

namespace kvlm::cpu::KVLM_SIMD_NS {
namespace {

// Q4_0 rows for attend_quantized (attention_quantized.h).
// [[maybe_unused]]: each path's copy of the pipeline reads only some of these.
struct Q4Kv {
  [[maybe_unused]] static constexpr int64_t kRowBlockBytes = sizeof(BlockQ4_0);  // fp16 scale, then 16 bytes of quants
  [[maybe_unused]] static constexpr int32_t kKeyBias = 8;                         // a nibble is q + 8
  [[maybe_unused]] static constexpr QueryForm kQueryForm = KVLM_AVX2 ? QueryForm::kLanes : QueryForm::kPlain;
  [[maybe_unused]] static constexpr size_t kKeyPrefetchAhead = kPrefetchAhead;
  [[maybe_unused]] static constexpr bool kPrefetchValues = false;
  [[maybe_unused]] static constexpr bool kWideValueSums = false;

  // Slot o's quants (nibble - 8) from its lanes (attention.h, KvLayout):
  // dimension c is byte c % 4 of lane c / 8, the low nibble if c % 8 < 4.
  static void decode_key(const KvLayout& layout, const uint8_t* kb, int32_t o, int8_t* out) {
    for (int64_t c = 0; c < layout.head_dim; ++c) {
      const uint8_t byte = kb[q4_key_lane_offset(layout, c / 8, o) + c % 4];
      out[c] = static_cast<int8_t>((c % 8 < 4 ? byte & 15 : byte >> 4) - 8);
    }
  }

  // d * (q - 8) of the block's 32 dimensions: the low nibbles are dimensions
  // 0..15, the high ones 16..31.
  static void dequantize_block(const uint8_t* blk, float* vals) {
    const float d = load_scale(blk);
    for (int i = 0; i < 16; ++i) {
      vals[i] = d * static_cast<float>((blk[2 + i] & 15) - 8);
      vals[i + 16] = d * static_cast<float>((blk[2 + i] >> 4) - 8);
    }
  }

#if KVLM_AVX2
  // d * (q - 8) of the 8 dimensions 8 j .. 8 j + 7: chunks 0 and 1 are the
  // low nibbles of bytes 0..7 and 8..15, chunks 2 and 3 the high ones.
  static __m256 dequantize8(const uint8_t* blk, int j, __m256 d) {
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + 2 + 8 * (j & 1)));
    const __m128i nibbles = _mm_and_si128(j < 2 ? bytes : _mm_srli_epi16(bytes, 4), _mm_set1_epi8(15));
    const __m256i q = _mm256_sub_epi32(_mm256_cvtepu8_epi32(nibbles), _mm256_set1_epi32(8));
    return _mm256_mul_ps(d, _mm256_cvtepi32_ps(q));
  }

  template <int NumQ>
  static void score_vec(const KvLayout& layout, const QuantKeyVec& vec, const QuantKeyVec& pf,
                        const QuantScratch& sc, float scale, float* const* rows);
#endif
};

#if KVLM_AVX2 && defined(__AVX512F__)
// ---- AVX512-VNNI: 16 slots a vector ----

// Scores of NumQ heads for one 16-slot key vector. The key quants (0..15)
// are VPDPBUSD's unsigned operand as they are; the query's four quants its
// signed one, broadcast from memory inside the instruction.
template <int NumQ>
void Q4Kv::score_vec(const KvLayout& layout, const QuantKeyVec& vec, const QuantKeyVec& pf, const QuantScratch& sc,
                     float scale, float* const* rows) {
  const int64_t lane_bytes = 4 * static_cast<int64_t>(layout.block_size);   // one lane group of a block
  const int64_t scale_bytes = 2 * static_cast<int64_t>(layout.block_size);  // one Q4_0 block's scales
  const int64_t nb = layout.head_dim / kQuantBlock;
  const __m512i low = _mm512_set1_epi8(15);
  __m512 acc[NumQ];
  for (int g = 0; g < NumQ; ++g) acc[g] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m512i isum[NumQ];
    for (int g = 0; g < NumQ; ++g) isum[g] = _mm512_set1_epi32(sc.qoff[b * NumQ + g]);
    for (int64_t j = 4 * b; j < 4 * b + 4; ++j) {
      _mm_prefetch(reinterpret_cast<const char*>(pf.quants + j * lane_bytes), _MM_HINT_T1);
      const __m512i v = _mm512_loadu_si512(vec.quants + j * lane_bytes);
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

// VPMADDUBSW multiplies the key quants (unsigned) by the query's (signed)
// and adds pairs into int16 (at most 2 * 15 * 127: exact), VPMADDWD the
// pairs into one int32 a slot.
template <int NumQ>
void Q4Kv::score_vec(const KvLayout& layout, const QuantKeyVec& vec, const QuantKeyVec& pf, const QuantScratch& sc,
                     float scale, float* const* rows) {
  const int64_t lane_bytes = 4 * static_cast<int64_t>(layout.block_size);
  const int64_t scale_bytes = 2 * static_cast<int64_t>(layout.block_size);
  const int64_t nb = layout.head_dim / kQuantBlock;
  const __m256i low = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
  __m256 acc[NumQ];
  for (int g = 0; g < NumQ; ++g) acc[g] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m256i isum[NumQ];
    for (int g = 0; g < NumQ; ++g) isum[g] = _mm256_set1_epi32(sc.qoff[b * NumQ + g]);
    for (int64_t j = 4 * b; j < 4 * b + 4; ++j) {
      _mm_prefetch(reinterpret_cast<const char*>(pf.quants + j * lane_bytes), _MM_HINT_T1);
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(vec.quants + j * lane_bytes));
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

thread_local QuantScratch t_q4;

}  // namespace

void attend_q4_0(const KvLayout& layout, const KvLayer& layer, const AttentionSeq& seq, int32_t kv_head, int64_t lo,
                 int64_t hi, const float* const* qs, int num_q, const AttentionParams& params, float* const* outs,
                 float* stat_row) {
  attend_quantized<Q4Kv>(t_q4, layout, layer, seq, kv_head, lo, hi, qs, num_q, params, outs, stat_row);
}

}  // namespace kvlm::cpu::KVLM_SIMD_NS
