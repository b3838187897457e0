// matmul kernels for the K-quant weight types (Q4_K, Q6_K) against Q8_K
// activations. Per 256-value super-block the integer part is exact:
//   Q4_K: sumi = sum_j sc_j (q_j . x_j),  summ = sum_j m_j sum(x_j)   (j: 8 groups of 32)
//   Q6_K: sumi = sum_g sc_g ((q_g - 32) . x_g)                        (g: 16 groups of 16)
// and only the fixed float steps of matmul_impl.h use d, dmin and dx.
//
// As in matmul_q8.cpp the SIMD kernels read strips of 8 rows interleaved 4
// bytes at a time (lane k = row k): the 4-bit and 6-bit quants stay unsigned
// (0..15, 0..63), so maddubs needs no sign trick; Q6_K's offset 32 comes back
// through the activations' block sums. Nibbles are split, 6-bit values
// assembled and the scales widened once per strip and super-block, then used
// by every token of the tile.
#include <cstring>
#include <vector>

#include "backend/cpu/matmul_impl.h"
#include "backend/cpu/simd.h"
#include "backend/quant.h"
#include "backend/quant_impl.h"

namespace kvlm::cpu {
namespace {

// Q4_K: per token an int16 sub-block sum, an int32 super-block sum and a float
// accumulator: 3 x 4 + 4 registers. With AVX-512 VNNI (32 registers, int32
// sub-block sums straight from vpdpbusd) 8 tokens share each weight vector.
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define KVLM_VNNI 1
[[maybe_unused]] constexpr int kMaxTileQ4K = 8;
#elif KVLM_VNNI256  // AVX-VNNI: 16 registers, so 4 tokens
#define KVLM_VNNI 1
[[maybe_unused]] constexpr int kMaxTileQ4K = 4;
#else
#define KVLM_VNNI 0
[[maybe_unused]] constexpr int kMaxTileQ4K = 4;
#endif
// Q6_K: four assembled 6-bit vectors stay live while the tokens use them;
// with AVX-512 VNNI a token needs only its int32 and float sums.
#if KVLM_VNNI && defined(__AVX512F__)
[[maybe_unused]] constexpr int kMaxTileQ6K = 8;
#else
[[maybe_unused]] constexpr int kMaxTileQ6K = 4;
#endif

#ifndef KVLM_KERNEL_ISA
// Scalar twins: the GGUF layout, one (row, token) at a time, the same float steps.
void run_scalar_q4_k(const WeightMatrix& w, const MatmulActs& a, int64_t row_begin, int64_t row_end,
                     int64_t tok_begin, int64_t tok_end, float* y) {
  const int64_t num_blocks = w.cols / 256;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const auto* blocks = reinterpret_cast<const BlockQ4_K*>(static_cast<const uint8_t*>(w.data) + r * row_bytes(w.dtype, w.cols));
    for (int64_t t = tok_begin; t < tok_end; ++t) {
      float acc = 0.f;
      for (int64_t b = 0; b < num_blocks; ++b) {
        const BlockQ4_K& blk = blocks[b];
        const ActBlockQ8K& x = a.q8k[t * num_blocks + b];
        uint8_t sc[8];
        uint8_t mn[8];
        detail::unpack_q4_k_scales(blk.scales, sc, mn);
        int32_t sumi = 0;
        int32_t summ = 0;
        for (int j = 0; j < 8; ++j) {
          const uint8_t* q = blk.qs + 32 * (j / 2);
          const int shift = (j % 2) * 4;
          int32_t dot = 0;
          for (int l = 0; l < 32; ++l) dot += ((q[l] >> shift) & 0xF) * x.qs[32 * j + l];
          sumi += sc[j] * dot;
          summ += mn[j] * x.bsum_pairs[j];
        }
        acc = accumulate_block(acc, sumi, fp16_to_f32(blk.d) * x.d);
        acc = std::fma(-static_cast<float>(summ), fp16_to_f32(blk.dmin) * x.d, acc);
      }
      y[t * w.rows + r] = acc;
    }
  }
}

void run_scalar_q6_k(const WeightMatrix& w, const MatmulActs& a, int64_t row_begin, int64_t row_end,
                     int64_t tok_begin, int64_t tok_end, float* y) {
  const int64_t num_blocks = w.cols / 256;
  std::vector<int8_t> q(static_cast<size_t>(w.cols));  // one row's quants minus 32
  for (int64_t r = row_begin; r < row_end; ++r) {
    const auto* blocks = reinterpret_cast<const BlockQ6_K*>(static_cast<const uint8_t*>(w.data) + r * row_bytes(w.dtype, w.cols));
    for (int64_t b = 0; b < num_blocks; ++b) {
      for (int h = 0; h < 2; ++h) {
        const uint8_t* ql = blocks[b].ql + 64 * h;
        const uint8_t* qh = blocks[b].qh + 32 * h;
        int8_t* qo = q.data() + 256 * b + 128 * h;
        for (int l = 0; l < 32; ++l) {
          qo[l] = static_cast<int8_t>(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
          qo[l + 32] = static_cast<int8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
          qo[l + 64] = static_cast<int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
          qo[l + 96] = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
      }
    }
    for (int64_t t = tok_begin; t < tok_end; ++t) {
      float acc = 0.f;
      for (int64_t b = 0; b < num_blocks; ++b) {
        const ActBlockQ8K& x = a.q8k[t * num_blocks + b];
        int32_t sumi = 0;
        for (int g = 0; g < 16; ++g) {
          int32_t dot = 0;
          for (int l = 0; l < 16; ++l) dot += q[256 * b + 16 * g + l] * x.qs[16 * g + l];
          sumi += blocks[b].scales[g] * dot;
        }
        acc = accumulate_block(acc, sumi, fp16_to_f32(blocks[b].d) * x.d);
      }
      y[t * w.rows + r] = acc;
    }
  }
}

#endif  // KVLM_KERNEL_ISA

}  // namespace

#if defined(KVLM_KERNEL_ISA) && KVLM_AVX2
namespace KVLM_KERNEL_ISA {
namespace {

// Strips are stored in pairs (paired_strips(): PackedWeights), strip 2p in
// slot 0 and 2p + 1 in slot 1, one super-block column (256 values) of both at
// a time, and every field [.. slot][row]: the 16 rows the AVX-512 kernels take
// at once are one stream read front to back, and each field of all 16 rows
// one zmm load. With each strip's blocks whole, [2p's block][2p + 1's block],
// a Zen 5 core read Q4_K weights at 9.6 GB/s, against 12.3 with the strips
// apart and 2x that with this layout (2026-12-01). A strip packed alone
// into scratch takes slot 0.
//
// Q4_K: qs vector 8k + v holds bytes 32k + 4v .. 32k + 4v + 3 of each row:
// low nibbles are values 64k + 4v.. (sub-block 2k), high nibbles values
// 64k + 32 + 4v.. (sub-block 2k + 1).
struct PairQ4K {
  uint8_t scales[8][2][kStripRows];        // [sub-block j][slot][row], 6-bit
  uint8_t min_pairs[4][2][kStripRows][2];  // [i][slot][row]: mins of sub-blocks 2i, 2i + 1
  uint16_t d[2][kStripRows];               // fp16
  uint16_t dmin[2][kStripRows];            // fp16
  Bytes32 qs[32][2];                       // [vector][slot]
};
static_assert(sizeof(PairQ4K) == 2368 && sizeof(PairQ4K) % 64 == 0);

// Q6_K: ql and qh bytes interleaved as GGUF orders them (ql vector 16h + i,
// qh vector 8h + j: bytes 4i .. 4i + 3, 4j .. 4j + 3 of half h of each row),
// each half's 24 vectors in the order the kernels first read them (q6_pos):
// ql 0-3, qh 0-3, ql 4-7, qh 4-7, ql 8-15. With all ql before all qh the
// kernel read two places of a block in turn, and a Zen 5 core read Q6_K at
// 6.8 GB/s.
struct PairQ6K {
  int8_t scale_pairs[8][2][kStripRows][2];  // [i][slot][row]: scales of sub-blocks 2i, 2i + 1
  uint16_t d[2][kStripRows];                // fp16
  uint8_t padding[32];                      // whole 64-byte lines
  Bytes32 q[2][24][2];                      // [half][position][slot]
};
static_assert(sizeof(PairQ6K) == 3392 && sizeof(PairQ6K) % 64 == 0);
constexpr int q6_ql_pos(int i) { return i < 4 ? i : i < 8 ? i + 4 : i + 8; }  // ql i (0..15) of a half
constexpr int q6_qh_pos(int j) { return j < 4 ? j + 4 : j + 8; }              // qh j (0..7) of a half
inline const Bytes32* q6_ql(const PairQ6K& p, int v) { return p.q[v / 16][q6_ql_pos(v % 16)]; }
inline const Bytes32* q6_qh(const PairQ6K& p, int v) { return p.q[v / 8][q6_qh_pos(v % 8)]; }

// One strip's share of a pair's super-block, for the 8-row kernels.
struct BlockQ4KOf {
  const PairQ4K& p;
  int s;  // slot
  const Bytes32& qs(int v) const { return p.qs[v][s]; }
  const uint8_t* scales(int j) const { return p.scales[j][s]; }
  const uint8_t* min_pairs(int i) const { return p.min_pairs[i][s][0]; }
  const uint16_t* d() const { return p.d[s]; }
  const uint16_t* dmin() const { return p.dmin[s]; }
};
struct BlockQ6KOf {
  const PairQ6K& p;
  int s;
  const Bytes32& ql(int v) const { return q6_ql(p, v)[s]; }
  const Bytes32& qh(int v) const { return q6_qh(p, v)[s]; }
  const int8_t* scale_pairs(int i) const { return p.scale_pairs[i][s][0]; }
  const uint16_t* d() const { return p.d[s]; }
};

// A strip's super-block columns: block(b) is its share of pair block b.
template <typename Pair, typename Share>
struct KStrip {
  const Pair* pairs = nullptr;
  int slot = 0;
  explicit KStrip(StripAt at) : pairs(reinterpret_cast<const Pair*>(at.bytes)), slot(at.slot) {}
  Share block(int64_t b) const { return {pairs[b], slot}; }
};
using StripQ4K = KStrip<PairQ4K, BlockQ4KOf>;
using StripQ6K = KStrip<PairQ6K, BlockQ6KOf>;

// Interleaves n chunks of 32 bytes of 8 rows (src[k] + 32 c) into out[8 c .. 8 c + 7].
void interleave_rows(const uint8_t* const* src, int num_chunks, Bytes32* out) {
  for (int c = 0; c < num_chunks; ++c) {
    __m256i v[kStripRows];
    for (int k = 0; k < kStripRows; ++k) v[k] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src[k] + 32 * c));
    simd::transpose8_epi32(v);
    for (int j = 0; j < 8; ++j) _mm256_store_si256(reinterpret_cast<__m256i*>(out + 8 * c + j), v[j]);
  }
}

inline __m256i load(const Bytes32& b) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(&b)); }

// The dot step of tile_q4_k's sub-blocks: 8 groups of 4 products of a
// row's unsigned quants (0..15) and a token's signed ones, summed, then
// times the sub-block's 6-bit scale. Either way the same integers.
//
// maddubs: 8 groups x 2 products of at most 15 x 127 per int16 lane, no
// overflow; madd widens them against the scale in both int16 halves.
struct Q4KMaddubs {
  static __m256i add(__m256i dots, __m256i q, __m256i x) { return _mm256_add_epi16(dots, _mm256_maddubs_epi16(q, x)); }
  // 8 unsigned bytes (one per row) -> int16 pairs (s_k, s_k) in lane k, for madd.
  static __m256i widen_scales(const uint8_t* s) {
    const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s)));
    return _mm256_or_si256(v, _mm256_slli_epi32(v, 16));
  }
  static __m256i scaled(__m256i dots, __m256i scales) { return _mm256_madd_epi16(dots, scales); }
};

#if KVLM_VNNI
// vpdpbusd: the sub-block's 32 products per row summed exactly in int32,
// then times its scale.
struct Q4KVnni {
  static __m256i add(__m256i dots, __m256i q, __m256i x) { return simd::dpbusd(dots, q, x); }
  static __m256i widen_scales(const uint8_t* s) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s)));
  }
  static __m256i scaled(__m256i dots, __m256i scales) { return _mm256_mullo_epi32(dots, scales); }
};
using Q4KDot = Q4KVnni;
#else
using Q4KDot = Q4KMaddubs;
#endif

// The pair kernels' software prefetch for block b: the pair's block two on
// (one stream), and the next pair's first blocks while this one ends (see
// for_each_strip_pair).
template <typename Pair>
inline void prefetch_k_pair(const Pair* pairs, const Pair* next, int64_t b, int64_t num_blocks) {
  constexpr int64_t kAhead = 2;
  simd::prefetch(pairs + b + kAhead, sizeof(Pair));
  if (next != nullptr && b >= num_blocks - kAhead) simd::prefetch(next + (b - (num_blocks - kAhead)), sizeof(Pair));
}

// Adds super-blocks [b0, b1) of the strip's products with tokens t0 ..
// t0 + C - 1 to acc (b0 == 0 starts the float chain at 0; later ranges go on
// where the last call left it).
template <int C>
[[gnu::always_inline]] inline void tile_q4_k(StripAt strip, const MatmulActs& a, int64_t t0, int64_t b0, int64_t b1, __m256* acc_io) {
  const int64_t num_blocks = a.cols / 256;
  const StripQ4K s(strip);
  const ActBlockQ8K* x[C];
  for (int c = 0; c < C; ++c) x[c] = a.q8k + (t0 + c) * num_blocks;
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  __m256 acc[C];
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) acc[c] = b0 == 0 ? _mm256_setzero_ps() : acc_io[c];
  for (int64_t b = b0; b < b1; ++b) {
    const BlockQ4KOf blk = s.block(b);
    if (strip.slot == 0) {
      if (prefetch_strips<C>()) {
        simd::prefetch(s.pairs + b + 2, sizeof(PairQ4K));
      } else if (prefetch_far_decode<C>()) {
        prefetch_far(s.pairs + b, sizeof(PairQ4K));
      }
    }
    __m256i isum[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) isum[c] = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {  // sub-block j: values 32j .. 32j + 31
      const int v0 = 8 * (j / 2);
      const __m128i shift = _mm_cvtsi32_si128(4 * (j % 2));
      __m256i dots[C];
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) dots[c] = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int v = 0; v < 8; ++v) {
        const __m256i q = _mm256_and_si256(_mm256_srl_epi16(load(blk.qs(v0 + v)), shift), low4);
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) dots[c] = Q4KDot::add(dots[c], q, simd::broadcast4(x[c][b].qs + 32 * j + 4 * v));
      }
      const __m256i sc = Q4KDot::widen_scales(blk.scales(j));
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) isum[c] = _mm256_add_epi32(isum[c], Q4KDot::scaled(dots[c], sc));
    }
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.d())));
    const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.dmin())));
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      __m256i summ = _mm256_setzero_si256();
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        const __m256i m = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.min_pairs(i))));
        summ = _mm256_add_epi32(summ, _mm256_madd_epi16(m, simd::broadcast4(x[c][b].bsum_pairs + 2 * i)));
      }
      const __m256 dx = _mm256_set1_ps(x[c][b].d);
      acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), _mm256_mul_ps(d, dx), acc[c]);
      acc[c] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(summ), _mm256_mul_ps(dmin, dx), acc[c]);
    }
  }
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) acc_io[c] = acc[c];
}

#if KVLM_VNNI && defined(__AVX512F__)
// tile_q4_k's VNNI route on a pair of strips at once (for_each_strip_pair):
// rows of slot 0 in lanes 0-7, of slot 1 in lanes 8-15, the same integers
// and float steps per lane. Each field of the pair's block is one load.
inline __m512i load512(const void* p) { return _mm512_loadu_si512(p); }
inline __m512i scales_u8_to_i32(const uint8_t* s16) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s16)));
}

// Sub-block j's int32 sums (q_j . x_j) per (row, token) times its scale, added to isum.
template <int C>
inline void q4_k_pair_sub_block(const PairQ4K& p, int j, const ActBlockQ8K* const* xb, __m512i* isum) {
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m128i shift = _mm_cvtsi32_si128(4 * (j % 2));
  __m512i d32[C];
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) d32[c] = _mm512_setzero_si512();
#pragma GCC unroll 8
  for (int v = 0; v < 8; ++v) {
    const __m512i q = _mm512_and_si512(_mm512_srl_epi16(load512(p.qs[8 * (j / 2) + v]), shift), low4);
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) d32[c] = simd::dpbusd_bcst(d32[c], q, xb[c]->qs + 32 * j + 4 * v);
  }
  const __m512i sc32 = scales_u8_to_i32(p.scales[j][0]);
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) isum[c] = _mm512_add_epi32(isum[c], _mm512_mullo_epi32(d32[c], sc32));
}

// The same integers for one token (decode), with more independent work:
// sub-blocks 2k and 2k + 1 are the low and high nibbles of the same qs
// vectors, loaded once for both, and each sub-block's 8 products go into two
// chains. One chain per sub-block, as above, kept a core waiting on
// vpdpbusd's latency. Integer sums are exact, so the order changes nothing.
inline void q4_k_pair_decode_block(const PairQ4K& p, const int8_t* xq, __m512i& isum) {
  const __m512i low4 = _mm512_set1_epi8(0x0F);
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    __m512i lo[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
    __m512i hi[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
#pragma GCC unroll 8
    for (int v = 0; v < 8; ++v) {
      const __m512i q = load512(p.qs[8 * k + v]);
      const __m512i ql = _mm512_and_si512(q, low4);
      const __m512i qh = _mm512_and_si512(_mm512_srli_epi16(q, 4), low4);
      lo[v % 2] = simd::dpbusd_bcst(lo[v % 2], ql, xq + 64 * k + 4 * v);
      hi[v % 2] = simd::dpbusd_bcst(hi[v % 2], qh, xq + 64 * k + 32 + 4 * v);
    }
    isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(_mm512_add_epi32(lo[0], lo[1]), scales_u8_to_i32(p.scales[2 * k][0])));
    isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(_mm512_add_epi32(hi[0], hi[1]), scales_u8_to_i32(p.scales[2 * k + 1][0])));
  }
}

// pairs: the pair's blocks; next: the next pair's (prefetched as this one
// ends), or nullptr.
template <int C>
void pair_q4_k_vnni(const PairQ4K* pairs, const MatmulActs& a, int64_t t0, __m512* out, const PairQ4K* next,
                    bool cold) {
  const int64_t num_blocks = a.cols / 256;
  const ActBlockQ8K* x[C];
  for (int c = 0; c < C; ++c) x[c] = a.q8k + (t0 + c) * num_blocks;
  __m512 acc[C];
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  for (int64_t b = 0; b < num_blocks; ++b) {
    const PairQ4K& p = pairs[b];
    if (prefetch_far_tile<C>(cold) || prefetch_far_decode<C>()) {
      prefetch_far(pairs + b, sizeof(PairQ4K));
    } else if (prefetch_strips<C>()) {
      prefetch_k_pair(pairs, next, b, num_blocks);
    }
    const ActBlockQ8K* xb[C];
    for (int c = 0; c < C; ++c) xb[c] = x[c] + b;
    __m512i isum[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) isum[c] = _mm512_setzero_si512();
    if constexpr (C == 1) {
      q4_k_pair_decode_block(p, xb[0]->qs, isum[0]);
    } else {
      for (int j = 0; j < 8; ++j) q4_k_pair_sub_block<C>(p, j, xb, isum);
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.d)));
    const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.dmin)));
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      __m512i summ = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        const __m512i m = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.min_pairs[i])));
        summ = _mm512_add_epi32(summ, _mm512_madd_epi16(m, broadcast4_512(xb[c]->bsum_pairs + 2 * i)));
      }
      const __m512 dx = _mm512_set1_ps(xb[c]->d);
      acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[c]), _mm512_mul_ps(d, dx), acc[c]);
      acc[c] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(summ), _mm512_mul_ps(dmin, dx), acc[c]);
    }
  }
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) out[c] = acc[c];
}
#endif  // KVLM_VNNI && __AVX512F__

// Sub-block S (0..7) of half h of a Q6_K super-block: values 128h + 16S ..
// 128h + 16S + 15, in four groups of 4. Their low 4 bits are the low (S < 4)
// or high (S >= 4) nibbles of ql vectors 16h + 4(S % 4) + u; their high 2 bits
// are bits 2(S / 2) of qh vectors 8h + 4(S % 2) + u.
template <int C, int S>
inline void q6_k_sub_block(const BlockQ6KOf& blk, int h, const ActBlockQ8K* const* x, __m256i* isum) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i bits45 = _mm256_set1_epi8(0x30);
  __m256i q[4];
#pragma GCC unroll 4
  for (int u = 0; u < 4; ++u) {
    __m256i lo = load(blk.ql(16 * h + 4 * (S % 4) + u));
    if constexpr (S >= 4) lo = _mm256_srli_epi16(lo, 4);
    __m256i hi = load(blk.qh(8 * h + 4 * (S % 2) + u));
    constexpr int kBit = 2 * (S / 2);  // move bits kBit, kBit+1 to 4, 5
    if constexpr (kBit < 4) hi = _mm256_slli_epi16(hi, 4 - kBit);
    if constexpr (kBit > 4) hi = _mm256_srli_epi16(hi, kBit - 4);
    q[u] = _mm256_or_si256(_mm256_and_si256(lo, low4), _mm256_and_si256(hi, bits45));
  }
  // Scale of this sub-block in both int16 halves of each row's lane.
  const __m256i pairs = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scale_pairs(4 * h + S / 2))));
  const __m256i dup = S % 2 == 0 ? _mm256_setr_epi8(0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13, 0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13)
                                 : _mm256_setr_epi8(2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15, 2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15);
  const __m256i sc = _mm256_shuffle_epi8(pairs, dup);
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) {
    // Two groups' products (2 x 2 x 63 x 127 per int16 lane) fit int16; four do not.
    const int8_t* xq = x[c]->qs + 128 * h + 16 * S;
    const __m256i p01 = _mm256_add_epi16(_mm256_maddubs_epi16(q[0], simd::broadcast4(xq)),
                                         _mm256_maddubs_epi16(q[1], simd::broadcast4(xq + 4)));
    const __m256i p23 = _mm256_add_epi16(_mm256_maddubs_epi16(q[2], simd::broadcast4(xq + 8)),
                                         _mm256_maddubs_epi16(q[3], simd::broadcast4(xq + 12)));
    isum[c] = _mm256_add_epi32(isum[c], _mm256_add_epi32(_mm256_madd_epi16(p01, sc), _mm256_madd_epi16(p23, sc)));
  }
}

// Adds super-blocks [b0, b1) of the strip's products with tokens t0 ..
// t0 + C - 1 to acc (b0 == 0 starts the float chain at 0; later ranges go on
// where the last call left it).
template <int C>
[[gnu::always_inline]] inline void tile_q6_k(StripAt strip, const MatmulActs& a, int64_t t0, int64_t b0, int64_t b1, __m256* acc_io) {
  const int64_t num_blocks = a.cols / 256;
  const StripQ6K s(strip);
  __m256 acc[C];
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) acc[c] = b0 == 0 ? _mm256_setzero_ps() : acc_io[c];
  for (int64_t b = b0; b < b1; ++b) {
    const BlockQ6KOf blk = s.block(b);
    if (strip.slot == 0) {
      if (prefetch_strips<C>()) {
        simd::prefetch(s.pairs + b + 2, sizeof(PairQ6K));
      } else if (prefetch_far_decode<C>()) {
        prefetch_far(s.pairs + b, sizeof(PairQ6K));
      }
    }
    const ActBlockQ8K* x[C];
    for (int c = 0; c < C; ++c) x[c] = a.q8k + (t0 + c) * num_blocks + b;
    __m256i isum[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) isum[c] = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      q6_k_sub_block<C, 0>(blk, h, x, isum);
      q6_k_sub_block<C, 1>(blk, h, x, isum);
      q6_k_sub_block<C, 2>(blk, h, x, isum);
      q6_k_sub_block<C, 3>(blk, h, x, isum);
      q6_k_sub_block<C, 4>(blk, h, x, isum);
      q6_k_sub_block<C, 5>(blk, h, x, isum);
      q6_k_sub_block<C, 6>(blk, h, x, isum);
      q6_k_sub_block<C, 7>(blk, h, x, isum);
    }
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.d())));
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      // The stored quants are q + 32: subtract 32 sum_g sc_g sum(x_g).
      __m256i bias = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) {
        const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scale_pairs(i))));
        bias = _mm256_add_epi32(bias, _mm256_madd_epi16(sc, simd::broadcast4(x[c]->bsums + 2 * i)));
      }
      const __m256i sumi = _mm256_sub_epi32(isum[c], _mm256_slli_epi32(bias, 5));
      acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_mul_ps(d, _mm256_set1_ps(x[c]->d)), acc[c]);
    }
  }
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) acc_io[c] = acc[c];
}

#if KVLM_VNNI && defined(__AVX512F__)
// q6_k_sub_block on a pair of strips at once (for_each_strip_pair): slot 0's
// rows in lanes 0-7, slot 1's in lanes 8-15, the same integers.
template <int C, int S>
inline void q6_k_pair_sub_block(const PairQ6K& p, int h, const ActBlockQ8K* const* x, __m512i* isum) {
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m512i bits45 = _mm512_set1_epi8(0x30);
  __m512i q[4];
#pragma GCC unroll 4
  for (int u = 0; u < 4; ++u) {
    __m512i lo = _mm512_loadu_si512(q6_ql(p, 16 * h + 4 * (S % 4) + u));
    if constexpr (S >= 4) lo = _mm512_srli_epi16(lo, 4);
    __m512i hi = _mm512_loadu_si512(q6_qh(p, 8 * h + 4 * (S % 2) + u));
    constexpr int kBit = 2 * (S / 2);
    if constexpr (kBit < 4) hi = _mm512_slli_epi16(hi, 4 - kBit);
    if constexpr (kBit > 4) hi = _mm512_srli_epi16(hi, kBit - 4);
    q[u] = _mm512_or_si512(_mm512_and_si512(lo, low4), _mm512_and_si512(hi, bits45));
  }
  // vpdpbusd sums each row's 16 products in int32 (the quants are unsigned
  // 0..63), then times the sub-block's scale, the byte S % 2 of each row's
  // pair sign-extended: 6 instructions a token where tile_q6_k's maddubs
  // route takes 10. The same integers: that route never saturates. With
  // several tokens (it served decode alone before; tiles of several tokens
  // took the maddubs route in zmm) Q6_K's 8-token tile went from 161-174 to
  // 210-224 GFLOP/s on a Zen 5 core.
  const __m512i pair16 =
      _mm512_cvtepi16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.scale_pairs[4 * h + S / 2])));
  const __m512i sc32 = S % 2 == 0 ? _mm512_srai_epi32(_mm512_slli_epi32(pair16, 24), 24) : _mm512_srai_epi32(pair16, 8);
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) {
    const int8_t* xq = x[c]->qs + 128 * h + 16 * S;
    __m512i d32 = simd::dpbusd_bcst(_mm512_setzero_si512(), q[0], xq);
    d32 = simd::dpbusd_bcst(d32, q[1], xq + 4);
    d32 = simd::dpbusd_bcst(d32, q[2], xq + 8);
    d32 = simd::dpbusd_bcst(d32, q[3], xq + 12);
    isum[c] = _mm512_add_epi32(isum[c], _mm512_mullo_epi32(d32, sc32));
  }
}

template <int C>
void pair_q6_k(const PairQ6K* pairs, const MatmulActs& a, int64_t t0, __m512* out, const PairQ6K* next, bool cold) {
  const int64_t num_blocks = a.cols / 256;
  __m512 acc[C];
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  for (int64_t b = 0; b < num_blocks; ++b) {
    const PairQ6K& p = pairs[b];
    if (prefetch_far_tile<C>(cold) || prefetch_far_decode<C>()) {
      prefetch_far(pairs + b, sizeof(PairQ6K));
    } else if (prefetch_strips<C>()) {
      prefetch_k_pair(pairs, next, b, num_blocks);
    }
    const ActBlockQ8K* x[C];
    for (int c = 0; c < C; ++c) x[c] = a.q8k + (t0 + c) * num_blocks + b;
    __m512i isum[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) isum[c] = _mm512_setzero_si512();
    for (int h = 0; h < 2; ++h) {
      q6_k_pair_sub_block<C, 0>(p, h, x, isum);
      q6_k_pair_sub_block<C, 1>(p, h, x, isum);
      q6_k_pair_sub_block<C, 2>(p, h, x, isum);
      q6_k_pair_sub_block<C, 3>(p, h, x, isum);
      q6_k_pair_sub_block<C, 4>(p, h, x, isum);
      q6_k_pair_sub_block<C, 5>(p, h, x, isum);
      q6_k_pair_sub_block<C, 6>(p, h, x, isum);
      q6_k_pair_sub_block<C, 7>(p, h, x, isum);
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.d)));
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      __m512i bias = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) {
        const __m512i sc = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.scale_pairs[i])));
        bias = _mm512_add_epi32(bias, _mm512_madd_epi16(sc, broadcast4_512(x[c]->bsums + 2 * i)));
      }
      const __m512i sumi = _mm512_sub_epi32(isum[c], _mm512_slli_epi32(bias, 5));
      acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_mul_ps(d, _mm512_set1_ps(x[c]->d)), acc[c]);
    }
  }
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) out[c] = acc[c];
}
#endif  // KVLM_VNNI && __AVX512F__ (Q6_K)

}  // namespace

// Bytes of one strip; a pair takes twice that, interleaved (KStrip).
size_t strip_bytes_q4_k(int64_t cols) { return static_cast<size_t>(cols / 256) * sizeof(PairQ4K) / 2; }
size_t strip_bytes_q6_k(int64_t cols) { return static_cast<size_t>(cols / 256) * sizeof(PairQ6K) / 2; }

void pack_strip_q4_k(const uint8_t* const* rows, int64_t cols, uint8_t* out, int slot) {
  auto* pairs = reinterpret_cast<PairQ4K*>(out);
  for (int64_t b = 0; b < cols / 256; ++b) {
    PairQ4K& dst = pairs[b];
    const uint8_t* qs[kStripRows];
    for (int k = 0; k < kStripRows; ++k) {
      const auto& blk = reinterpret_cast<const BlockQ4_K*>(rows[k])[b];
      qs[k] = blk.qs;
      uint8_t sc[8];
      uint8_t mn[8];
      detail::unpack_q4_k_scales(blk.scales, sc, mn);
      for (int j = 0; j < 8; ++j) dst.scales[j][slot][k] = sc[j];
      for (int i = 0; i < 4; ++i) {
        dst.min_pairs[i][slot][k][0] = mn[2 * i];
        dst.min_pairs[i][slot][k][1] = mn[2 * i + 1];
      }
      dst.d[slot][k] = blk.d;
      dst.dmin[slot][k] = blk.dmin;
    }
    Bytes32 interleaved[32];
    interleave_rows(qs, 4, interleaved);
    for (int v = 0; v < 32; ++v) dst.qs[v][slot] = interleaved[v];
  }
}

void pack_strip_q6_k(const uint8_t* const* rows, int64_t cols, uint8_t* out, int slot) {
  auto* pairs = reinterpret_cast<PairQ6K*>(out);
  for (int64_t b = 0; b < cols / 256; ++b) {
    PairQ6K& dst = pairs[b];
    const uint8_t* ql[kStripRows];
    const uint8_t* qh[kStripRows];
    for (int k = 0; k < kStripRows; ++k) {
      const auto& blk = reinterpret_cast<const BlockQ6_K*>(rows[k])[b];
      ql[k] = blk.ql;
      qh[k] = blk.qh;
      for (int i = 0; i < 8; ++i) {
        dst.scale_pairs[i][slot][k][0] = blk.scales[2 * i];
        dst.scale_pairs[i][slot][k][1] = blk.scales[2 * i + 1];
      }
      dst.d[slot][k] = blk.d;
    }
    Bytes32 interleaved[48];
    interleave_rows(ql, 4, interleaved);
    interleave_rows(qh, 2, interleaved + 32);
    for (int v = 0; v < 32; ++v) const_cast<Bytes32*>(q6_ql(dst, v))[slot] = interleaved[v];
    for (int v = 0; v < 16; ++v) const_cast<Bytes32*>(q6_qh(dst, v))[slot] = interleaved[32 + v];
  }
}

#if defined(__AVX512F__)
// The AVX-512 drive of a K-quant: pair.template operator()<C>(pairs, t, out,
// next, cold) on each pair of strips (next: the next pair's blocks, to
// prefetch as this one ends, or nullptr; cold: see for_each_strip_pair),
// range (tile_q4_k's contract) on the rest.
template <int kMaxTile, typename Pair, typename PairFn, typename RangeFn>
void run_k_pairs(const WeightMatrix& w, int64_t r0, int64_t r1, int64_t t0, int64_t t1, float* y, PairFn&& pair,
                 RangeFn&& range) {
  const int64_t num_blocks = w.cols / 256;
  auto whole = whole_strip(range, num_blocks);
  auto two_strips = [&]<int C>(StripAt sa, StripAt sb, int64_t t, __m512* out, StripAt next, bool cold) {
    if (sa.bytes == sb.bytes && sa.slot == 0) {  // one pair, as the driver's 16-row chunks make them
      pair.template operator()<C>(reinterpret_cast<const Pair*>(sa.bytes), t, out,
                                  reinterpret_cast<const Pair*>(next.bytes), cold);
      return;
    }
    // Strips of two pairs: two 8-row tiles joined, the same arithmetic lane for lane.
    __m256 lo[C], hi[C];
    whole.template operator()<C>(sa, t, lo);
    whole.template operator()<C>(sb, t, hi);
    for (int c = 0; c < C; ++c) out[c] = _mm512_insertf32x8(_mm512_castps256_ps512(lo[c]), hi[c], 1);
  };
  for_each_strip_pair<kMaxTile>(w, r0, r1, t0, t1, y, two_strips, whole);
}
#endif

void kernel_q4_k(const WeightMatrix& w, const MatmulActs& a, int64_t r0, int64_t r1, int64_t t0,
                 int64_t t1, float* y) {
  // Super-blocks [b0, b1) of one strip into acc (tile_q4_k).
  auto range = [&]<int C>(StripAt strip, int64_t t, int64_t b0, int64_t b1, __m256* acc) {
    tile_q4_k<C>(strip, a, t, b0, b1, acc);
  };
#if KVLM_VNNI && defined(__AVX512F__)
  auto pair = [&]<int C>(const PairQ4K* pairs, int64_t t, __m512* out, const PairQ4K* next, bool cold) {
    pair_q4_k_vnni<C>(pairs, a, t, out, next, cold);
  };
  run_k_pairs<kMaxTileQ4K, PairQ4K>(w, r0, r1, t0, t1, y, pair, range);
#else
  for_each_strip_chunked<kMaxTileQ4K, 4>(w, r0, r1, t0, t1, y, w.cols / 256, range);
#endif
}

void kernel_q6_k(const WeightMatrix& w, const MatmulActs& a, int64_t r0, int64_t r1, int64_t t0,
                 int64_t t1, float* y) {
  // Super-blocks [b0, b1) of one strip into acc (tile_q6_k).
  auto range = [&]<int C>(StripAt strip, int64_t t, int64_t b0, int64_t b1, __m256* acc) {
    tile_q6_k<C>(strip, a, t, b0, b1, acc);
  };
#if KVLM_VNNI && defined(__AVX512F__)
  auto pair = [&]<int C>(const PairQ6K* pairs, int64_t t, __m512* out, const PairQ6K* next, bool cold) {
    pair_q6_k<C>(pairs, a, t, out, next, cold);
  };
  run_k_pairs<kMaxTileQ6K, PairQ6K>(w, r0, r1, t0, t1, y, pair, range);
#else
  for_each_strip_chunked<kMaxTileQ6K, 4>(w, r0, r1, t0, t1, y, w.cols / 256, range);
#endif
}

}  // namespace KVLM_KERNEL_ISA
#else  // the scalar twins, built once without ISA flags

void kernel_q4_k_scalar(const WeightMatrix& w, const MatmulActs& a, int64_t r0, int64_t r1, int64_t t0,
                        int64_t t1, float* y) {
  run_scalar_q4_k(w, a, r0, r1, t0, t1, y);
}

void kernel_q6_k_scalar(const WeightMatrix& w, const MatmulActs& a, int64_t r0, int64_t r1, int64_t t0,
                        int64_t t1, float* y) {
  run_scalar_q6_k(w, a, r0, r1, t0, t1, y);
}

#endif  // KVLM_KERNEL_ISA

}  // namespace kvlm::cpu
