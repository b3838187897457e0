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
//
// The pipeline around these is attention_quantized.h's, shared with Q4_0;
// this file holds what Q8_0 does its own way: the score kernels, the
// avx512 path's 16-dimension value sums and the byte decoding (Q8Kv).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>

#include "backend/cpu/attention_quantized.h"
#include "backend/quant.h"

namespace kvlm::cpu::KVLM_SIMD_NS {
namespace {

constexpr int64_t kQ8BlockBytes = sizeof(BlockQ8_0);  // fp16 scale, then 32 quants

// Q8_0 rows for attend_quantized (attention_quantized.h). The avx512 path
// (which requires AVX512-VNNI, cpu_path.cpp) takes the keys as quant + 128
// in VPDPBUSD; the avx2 path (and the avxvnni path, which runs it) as f32
// FMAs over integer-valued floats: every partial sum is an integer below
// 2^24 (32 products of at most 127 * 127), so each is exact, and the bits
// are VPDPBUSD's.
// [[maybe_unused]]: each path's copy of the pipeline reads only some of these.
struct Q8Kv {
  [[maybe_unused]] static constexpr int64_t kRowBlockBytes = kQ8BlockBytes;
#if KVLM_AVX2 && defined(__AVX512F__)
  [[maybe_unused]] static constexpr int32_t kKeyBias = 128;  // a quant xor its sign bit
  [[maybe_unused]] static constexpr QueryForm kQueryForm = QueryForm::kLanes;
  [[maybe_unused]] static constexpr size_t kKeyPrefetchAhead = kPrefetchAhead;
  [[maybe_unused]] static constexpr bool kWideValueSums = true;
#elif KVLM_AVX2
  [[maybe_unused]] static constexpr int32_t kKeyBias = 0;
  [[maybe_unused]] static constexpr QueryForm kQueryForm = QueryForm::kFloats;
  [[maybe_unused]] static constexpr size_t kKeyPrefetchAhead = 2 * kPrefetchAhead;  // 8-slot vectors: half a line each
  [[maybe_unused]] static constexpr bool kWideValueSums = false;
#else
  [[maybe_unused]] static constexpr int32_t kKeyBias = 0;
  [[maybe_unused]] static constexpr QueryForm kQueryForm = QueryForm::kPlain;
  [[maybe_unused]] static constexpr size_t kKeyPrefetchAhead = kPrefetchAhead;
  [[maybe_unused]] static constexpr bool kWideValueSums = false;
#endif
  [[maybe_unused]] static constexpr bool kPrefetchValues = true;

  // Slot o's quants, four dimensions a group (attention.h, KvLayout).
  static void decode_key(const KvLayout& layout, const uint8_t* kb, int32_t o, int8_t* out) {
    for (int64_t c = 0; c < layout.head_dim; c += 4) std::memcpy(out + c, kb + q8_key_quant_offset(layout, c, o), 4);
  }

  // d times each of the block's 32 quants: dequantize_row's products.
  static void dequantize_block(const uint8_t* blk, float* vals) {
    const float d = load_scale(blk);
    const auto* q = reinterpret_cast<const int8_t*>(blk + 2);
    for (int64_t i = 0; i < kQuantBlock; ++i) vals[i] = d * static_cast<float>(q[i]);
  }

#if KVLM_AVX2
  // d times the quants of dimensions 8 j .. 8 j + 7 of the block.
  static __m256 dequantize8(const uint8_t* blk, int j, __m256 d) {
    const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + 2 + 8 * j));
    return _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
  }

  template <int NumQ>
  static void score_vec(const KvLayout& layout, const QuantKeyVec& vec, const QuantKeyVec& pf,
                        const QuantScratch& sc, float scale, float* const* rows);
#endif

#if KVLM_AVX2 && defined(__AVX512F__)
  // 16 dimensions a vector, a whole Q8_0 block a pass (accumulate_block_q8).
  template <int NumQ>
  static void accumulate_wide(const KvLayout& layout, std::span<const BlockPart> parts, const float* const* w,
                              float* const* out);
#endif
};

#if KVLM_AVX2 && defined(__AVX512F__)
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
void Q8Kv::score_vec(const KvLayout& layout, const QuantKeyVec& vec, const QuantKeyVec& pf, const QuantScratch& sc,
                     float scale, float* const* rows) {
  const int64_t group_bytes = 4 * static_cast<int64_t>(layout.block_size);  // one dimension group of a block
  const int64_t scale_bytes = 2 * static_cast<int64_t>(layout.block_size);  // one Q8_0 block's scales
  const int64_t nb = layout.head_dim / kQuantBlock;
  const __m512i sign = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[NumQ];
  for (int g = 0; g < NumQ; ++g) acc[g] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m512i isum[NumQ];
    for (int g = 0; g < NumQ; ++g) isum[g] = _mm512_set1_epi32(sc.qoff[b * NumQ + g]);
    _mm_prefetch(reinterpret_cast<const char*>(pf.scales + b * scale_bytes), _MM_HINT_T1);
    for (int64_t j = b * kQuantBlock / 4; j < (b + 1) * kQuantBlock / 4; ++j) {
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
    for (int g = 0; g < NumQ; ++g) acc[j][g] = _mm512_loadu_ps(out[g] + kQuantBlock * blk + 16 * j);
  const size_t chunk = static_cast<size_t>(blk) * kQ8BlockBytes;
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
    for (int g = 0; g < NumQ; ++g) _mm512_storeu_ps(out[g] + kQuantBlock * blk + 16 * j, acc[j][g]);
}

template <int NumQ>
void Q8Kv::accumulate_wide(const KvLayout& layout, std::span<const BlockPart> parts, const float* const* w,
                           float* const* out) {
  constexpr size_t kSpan = 8;  // blocks whose values (8.5 KiB at TinyLlama's shape) stay in L1 across the Q8_0 blocks
  const int64_t nb = layout.head_dim / kQuantBlock;
  for (size_t b0 = 0; b0 < parts.size(); b0 += kSpan) {
    const size_t b1 = std::min(parts.size(), b0 + kSpan);
    for (int64_t blk = 0; blk < nb; ++blk) accumulate_block_q8<NumQ>(parts, b0, b1, blk, layout.row_bytes(), w, out);
  }
}
#elif KVLM_AVX2
// ---- AVX2: 8 slots a vector (scores), 8 dimensions (values) ----

// Scores of NumQ heads for one 8-slot key vector: a load of a dimension
// group holds 4 dimensions of each slot, one byte per dimension in each
// lane; shifting a byte to the top and back (arithmetic) sign-extends it.
template <int NumQ>
void Q8Kv::score_vec(const KvLayout& layout, const QuantKeyVec& vec, const QuantKeyVec& pf, const QuantScratch& sc,
                     float scale, float* const* rows) {
  const int64_t group_bytes = 4 * static_cast<int64_t>(layout.block_size);
  const int64_t scale_bytes = 2 * static_cast<int64_t>(layout.block_size);
  const int64_t nb = layout.head_dim / kQuantBlock;
  __m256 acc[NumQ];
  for (int g = 0; g < NumQ; ++g) acc[g] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m256 isum[NumQ];
    for (int g = 0; g < NumQ; ++g) isum[g] = _mm256_setzero_ps();
    for (int64_t j = b * kQuantBlock / 4; j < (b + 1) * kQuantBlock / 4; ++j) {
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
#endif

thread_local QuantScratch t_q8;

}  // namespace

void attend_q8_0(const KvLayout& layout, const KvLayer& layer, const AttentionSeq& seq, int32_t kv_head, int64_t lo,
                 int64_t hi, const float* const* qs, int num_q, const AttentionParams& params, float* const* outs,
                 float* stat_row) {
  attend_quantized<Q8Kv>(t_q8, layout, layer, seq, kv_head, lo, hi, qs, num_q, params, outs, stat_row);
}

}  // namespace kvlm::cpu::KVLM_SIMD_NS
