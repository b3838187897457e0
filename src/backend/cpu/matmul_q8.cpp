// matmul kernels for the 32-value block types (Q8_0, Q4_0) against Q8_0
// activations: an exact integer dot product per block, then the fixed float
// step acc = fma(isum, dw * dx, acc) (matmul_impl.h).
//
// The SIMD kernels work on strips of 8 weight rows interleaved 4 bytes at a
// time, so one ymm register holds quants 4g..4g+3 of all 8 rows and each
// 32-bit lane accumulates one row: a token's 4 activation quants are broadcast
// and meet 8 rows in one multiply, no horizontal sums anywhere. A strip is
// unpacked and sign-split once and then reused by every token of the tile
// (kMaxTile tokens share each weight register), so at T = 16 one weight load
// feeds 4 tokens x 8 rows x 4 values. Strips come from the load-time packed
// copy (pack_for_matmul) or are packed here on the fly.
#include <cstddef>
#include <cstring>
#include <vector>

#include "backend/cpu/matmul_impl.h"
#include "backend/cpu/simd.h"
#include "backend/quant.h"

namespace kvlm::cpu {
namespace {

// Per token a float and an int accumulator; with the weight vector, its
// absolute value, a product and the constant 1s that is 4 + 2 * 5 = 14 of the
// 16 ymm registers. With AVX-512 VNNI (32 ymm registers, one vpdpbusd per
// 32 products) the tiles are wider, so each weight load serves more tokens;
// AVX-VNNI (16 registers) keeps 5 tokens and gains the single instruction.
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define KVLM_VNNI 1
[[maybe_unused]] constexpr int kMaxTile = 10;
#elif KVLM_VNNI256
#define KVLM_VNNI 1
[[maybe_unused]] constexpr int kMaxTile = 5;
#else
#define KVLM_VNNI 0
[[maybe_unused]] constexpr int kMaxTile = 5;
#endif

// Bytes of the quants of one block-column of a strip: 8 rows x 32 quants for
// Q8_0, 8 rows x 16 bytes of nibbles for Q4_0.
[[maybe_unused]] constexpr int64_t kQ8StripQuantBytes = 256;
[[maybe_unused]] constexpr int64_t kQ4StripQuantBytes = 128;

[[maybe_unused]] size_t strip_bytes_for(int64_t cols, int64_t quant_bytes) {
  const int64_t num_blocks = cols / 32;
  const size_t bytes = static_cast<size_t>(num_blocks * (quant_bytes + 2 * kStripRows));  // quants and fp16 scales
  return (bytes + 31) / 32 * 32;
}

// One strip of the paired layout (matmul_impl.h, PackedWeights): a pair is
// [block][strip 2p's quants, strip 2p+1's quants, 2p's 8 fp16 scales, 2p+1's],
// kStride bytes a block, every part 32-aligned for the Q8_0 and Q4_0 sizes.
template <int64_t kQuantBytes>
struct PairedStrip {
  static constexpr int64_t kStride = 2 * (kQuantBytes + 2 * kStripRows);
  const uint8_t* quants;  // block 0's quants of this strip
  const uint8_t* scales;  // block 0's scales of this strip
  explicit PairedStrip(StripAt at)
      : quants(at.bytes + at.slot * kQuantBytes), scales(at.bytes + 2 * kQuantBytes + at.slot * 2 * kStripRows) {}
  const uint8_t* q(int64_t b) const { return quants + b * kStride; }
  const uint16_t* d(int64_t b) const { return reinterpret_cast<const uint16_t*>(scales + b * kStride); }
};

#ifndef KVLM_KERNEL_ISA
// Scalar twins: the GGUF layout, one (row, token) at a time, the same float steps.
inline void unpack_block(const BlockQ8_0& b, int8_t* q) {
  for (int j = 0; j < 32; ++j) q[j] = b.qs[j];
}
inline void unpack_block(const BlockQ4_0& b, int8_t* q) {
  for (int j = 0; j < 16; ++j) {
    q[j] = static_cast<int8_t>((b.qs[j] & 0xF) - 8);
    q[j + 16] = static_cast<int8_t>((b.qs[j] >> 4) - 8);
  }
}

template <typename Block>
void run_scalar(const WeightMatrix& w, const MatmulActs& a, int64_t row_begin, int64_t row_end,
                int64_t tok_begin, int64_t tok_end, float* y) {
  const int64_t cols = w.cols;
  const int64_t num_blocks = cols / 32;
  std::vector<int8_t> q(static_cast<size_t>(cols));      // one row's quants, unpacked
  std::vector<float> dw(static_cast<size_t>(num_blocks));  // and its scales
  for (int64_t r = row_begin; r < row_end; ++r) {
    const auto* blocks = reinterpret_cast<const Block*>(static_cast<const uint8_t*>(w.data) + r * row_bytes(w.dtype, cols));
    for (int64_t b = 0; b < num_blocks; ++b) {
      unpack_block(blocks[b], q.data() + 32 * b);
      dw[b] = fp16_to_f32(blocks[b].d);
    }
    for (int64_t t = tok_begin; t < tok_end; ++t) {
      const int8_t* xq = a.q8_qs + t * cols;
      const float* xd = a.q8_d + t * num_blocks;
      float acc = 0.f;
      for (int64_t b = 0; b < num_blocks; ++b) {
        int32_t isum = 0;
        for (int j = 0; j < 32; ++j) isum += q[32 * b + j] * xq[32 * b + j];
        acc = accumulate_block(acc, isum, dw[b] * xd[b]);
      }
      y[t * w.rows + r] = acc;
    }
  }
}

#endif  // KVLM_KERNEL_ISA

}  // namespace

#if defined(KVLM_KERNEL_ISA) && KVLM_AVX2
namespace KVLM_KERNEL_ISA {


// Q8_0 strip: [num_blocks][8 groups][8 rows x 4 quants], then [num_blocks][8 rows] fp16 d.
void pack_strip_q8_0(const uint8_t* const* rows, int64_t cols, uint8_t* out, int slot) {
  const int64_t num_blocks = cols / 32;
  const PairedStrip<kQ8StripQuantBytes> at(StripAt{out, slot});
  for (int64_t b = 0; b < num_blocks; ++b) {
    __m256i v[kStripRows];
    auto* d = const_cast<uint16_t*>(at.d(b));
    for (int k = 0; k < kStripRows; ++k) {
      const auto& blk = reinterpret_cast<const BlockQ8_0*>(rows[k])[b];
      v[k] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs));
      d[k] = blk.d;
    }
    simd::transpose8_epi32(v);
    auto* q = const_cast<uint8_t*>(at.q(b));
    for (int g = 0; g < 8; ++g) _mm256_store_si256(reinterpret_cast<__m256i*>(q + 32 * g), v[g]);
  }
}

// Q4_0 strip: [num_blocks][4 groups][8 rows x 4 bytes], the bytes as GGUF has
// them (low nibbles: values 4v..4v+3, high nibbles: values 16+4v..), then
// [num_blocks][8 rows] fp16 d.
void pack_strip_q4_0(const uint8_t* const* rows, int64_t cols, uint8_t* out, int slot) {
  const int64_t num_blocks = cols / 32;
  const PairedStrip<kQ4StripQuantBytes> at(StripAt{out, slot});
  for (int64_t b = 0; b < num_blocks; ++b) {
    __m256i v[kStripRows];
    auto* d = const_cast<uint16_t*>(at.d(b));
    for (int k = 0; k < kStripRows; ++k) {
      const auto& blk = reinterpret_cast<const BlockQ4_0*>(rows[k])[b];
      v[k] = _mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.qs)));
      d[k] = blk.d;
    }
    simd::transpose8_epi32(v);  // v[4..7] come from the zero upper halves
    auto* q = const_cast<uint8_t*>(at.q(b));
    for (int g = 0; g < 4; ++g) _mm256_store_si256(reinterpret_cast<__m256i*>(q + 32 * g), v[g]);
  }
}

namespace {

// The pair kernels' software prefetch for block b: the pair's block kAhead
// on (one stream where the strips are a pair, as the driver's 16-row chunks
// make them), and the next pair's first blocks while this one ends (see
// for_each_strip_pair).
template <int64_t kAhead, typename Strip>
inline void prefetch_pair(const Strip& sa, const Strip& sb, StripAt first, StripAt second, StripAt next, int64_t b,
                          int64_t num_blocks) {
  simd::prefetch(sa.q(b + kAhead), Strip::kStride);
  if (first.bytes != second.bytes) simd::prefetch(sb.q(b + kAhead), Strip::kStride);
  if (next.bytes != nullptr && b >= num_blocks - kAhead)
    simd::prefetch(next.bytes + (b - (num_blocks - kAhead)) * Strip::kStride, Strip::kStride);
}

// An 8-row tile's software prefetch for block b of its strip (the strip's
// quants and scales of that pair block): kAhead blocks on where
// prefetch_strips asks for it, else far ahead in decode on AMD
// (prefetch_far_decode).
template <int C, int64_t kAhead, int64_t kQuantBytes>
inline void prefetch_tile(const PairedStrip<kQuantBytes>& s, int64_t b) {
  constexpr int64_t kBytes = kQuantBytes + 2 * kStripRows;
  if (prefetch_strips<C>()) {
    simd::prefetch(s.q(b + kAhead), kBytes);
  } else if (prefetch_far_decode<C>()) {
    prefetch_far(s.q(b), kBytes);
  }
}

// Pointers to the C tokens' activation quants and scales.
template <int C>
struct TokenActs {
  const int8_t* qs[C];
  const float* d[C];
  const int32_t* sum[C];
  TokenActs(const MatmulActs& a, int64_t t0) {
    const int64_t num_blocks = a.cols / 32;
    for (int c = 0; c < C; ++c) {
      qs[c] = a.q8_qs + (t0 + c) * a.cols;
      d[c] = a.q8_d + (t0 + c) * num_blocks;
      sum[c] = a.q8_sum + (t0 + c) * num_blocks;
    }
  }
};

#if KVLM_VNNI && defined(__AVX512F__)
// The pair tiles' activations come block-major (MatmulActs::q8_tiles): a
// tile's C tokens of one block lie side by side, so every operand is one
// pointer plus a constant, and the tile needs three registers of addresses where it had
// three per token (GCC kept 30 pointers on the stack and in xmm registers,
// and rebuilt each block's start value through a general register). A block
// sum starts from kFloatBias (matmul_impl.h) and ends as the float
// as_float(sum) - offset, the offset a broadcast operand of the subtraction:
// the same bits as vcvtdq2ps of the sum less the offset in integers, but on
// the add ports, not the ones vpdpbusd needs.
struct TileBlocks {
  const uint8_t* at;  // the tile's first token of the current block
  int64_t stride;     // bytes from a block to the next
  TileBlocks(const MatmulActs& a, int64_t t0)
      : at(reinterpret_cast<const uint8_t*>(a.q8_tiles + t0)),
        stride(a.num_tokens * static_cast<int64_t>(sizeof(ActBlockQ8Tile))) {}
  const uint8_t* qs(int c) const { return at + c * sizeof(ActBlockQ8Tile); }
  // Token c's float at byte `field` of its ActBlockQ8Tile, in every lane.
  __m512 broadcast(int c, size_t field) const {
    float v;
    std::memcpy(&v, at + c * sizeof(ActBlockQ8Tile) + field, 4);
    return _mm512_set1_ps(v);
  }
};

// acc[c] += the block's float step for token c: isum[c] (from kFloatBias)
// less its offset, times dw * dx.
template <int C>
[[gnu::always_inline]] inline void block_steps(const TileBlocks& x, size_t offset, const __m512i* isum, __m512 dw,
                                               __m512* acc) {
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c) {
    const __m512 scale = _mm512_mul_ps(dw, x.broadcast(c, offsetof(ActBlockQ8Tile, d)));
    const __m512 sum = _mm512_sub_ps(_mm512_castsi512_ps(isum[c]), x.broadcast(c, offset));
    acc[c] = _mm512_fmadd_ps(sum, scale, acc[c]);
  }
}
#endif  // KVLM_VNNI && __AVX512F__

// The integer part of a block, for the tile templates below: a Dot type is
// one weight format met by one kind of int8 dot step (maddubs, or VNNI's
// vpdpbusd) and provides
//   kQuantBytes     quant bytes of a strip's block (PairedStrip)
//   kPrefetchAhead  blocks between a load and the prefetch made for it
//   block_sums<C>(q, x, b, isum)   isum[c] lane k: the exact sums of
//                   dot(row k's block b, token c's block b), as Dot keeps them
//   finish(isum, sum)  the int32 dot from those and the token's block sum
// and with AVX-512, for the pair tiles:
//   kOffsetField    ActBlockQ8Tile's offset the sums carry (kFloatBias aside)
//   pair_block_sums<C>(qa, qb, x, isum)   the same on 16 rows, from kFloatBias
// Integer sums are exact whichever way a Dot takes them, so every Dot of a
// format, and the scalar twin, gives the same bits.

// Q8_0 with maddubs, which multiplies unsigned by signed bytes: |w| times x
// with w's sign. |w| <= 128 and |x| <= 127, so a pair sum stays within int16.
struct Q8Maddubs {
  [[maybe_unused]] static constexpr int64_t kQuantBytes = kQ8StripQuantBytes;
  [[maybe_unused]] static constexpr int64_t kPrefetchAhead = 8;
  template <int C>
  [[gnu::always_inline]] static void block_sums(const uint8_t* q, const TokenActs<C>& x, int64_t b, __m256i* isum) {
    const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) isum[c] = _mm256_setzero_si256();
    // Not unrolled: unrolled, GCC regroups the integer adds and spills.
#pragma GCC unroll 1
    for (int g = 0; g < 8; ++g) {
      const __m256i wv = _mm256_load_si256(reinterpret_cast<const __m256i*>(q + 32 * g));
      const __m256i aw = _mm256_sign_epi8(wv, wv);
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        const __m256i xs = _mm256_sign_epi8(simd::broadcast4(x.qs[c] + 32 * b + 4 * g), wv);
        isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, xs), ones));
      }
    }
  }
  static __m256i finish(__m256i isum, int32_t) { return isum; }
};

// Q4_0 with maddubs: the nibbles stay unsigned (0..15) so maddubs needs no
// sign trick, and the offset comes back as isum = nib . x - 8 sum(x), exact
// in integers. A block's 8 products fit int16 (8 x 2 x 15 x 127 < 32768)
// before widening.
struct Q4Maddubs {
  [[maybe_unused]] static constexpr int64_t kQuantBytes = kQ4StripQuantBytes;
  [[maybe_unused]] static constexpr int64_t kPrefetchAhead = 16;
  template <int C>
  [[gnu::always_inline]] static void block_sums(const uint8_t* q, const TokenActs<C>& x, int64_t b, __m256i* isum) {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    __m256i p16[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) p16[c] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      const __m256i bytes = _mm256_load_si256(reinterpret_cast<const __m256i*>(q + 32 * v));
      const __m256i lo = _mm256_and_si256(bytes, low4);                         // values 4v..4v+3
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4);  // values 16+4v..
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        const int8_t* xb = x.qs[c] + 32 * b + 4 * v;
        const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, simd::broadcast4(xb)),
                                           _mm256_maddubs_epi16(hi, simd::broadcast4(xb + 16)));
        p16[c] = _mm256_add_epi16(p16[c], p);
      }
    }
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) isum[c] = p16[c];
  }
  // Widened beside the float step, as the kernel had it (the int16 sums
  // widened in a loop of their own took 5-7% more time at 8 and 16 tokens,
  // avx2 path, BM_MatmulHot/Q4_0).
  static __m256i finish(__m256i p16, int32_t sum) {
    return _mm256_sub_epi32(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)), _mm256_set1_epi32(8 * sum));
  }
};

#if KVLM_VNNI
// Q8_0 with vpdpbusd (unsigned x signed bytes, summed in 4s into int32, no
// intermediate saturation): the weights become unsigned as w + 128 (one xor
// per weight vector, shared by the tile's tokens) and the bias comes back
// out as 128 sum(x) per token and block, which the activations carry
// (MatmulActs::q8_sum, ActBlockQ8Tile::offset_q8_0).
struct Q8Vnni {
  static constexpr int64_t kQuantBytes = kQ8StripQuantBytes;
  static constexpr int64_t kPrefetchAhead = 8;
  template <int C>
  [[gnu::always_inline]] static void block_sums(const uint8_t* q, const TokenActs<C>& x, int64_t b, __m256i* isum) {
    const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) isum[c] = _mm256_set1_epi32(-128 * x.sum[c][b]);
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
      const __m256i wu = _mm256_xor_si256(_mm256_load_si256(reinterpret_cast<const __m256i*>(q + 32 * g)), bias);
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) isum[c] = simd::dpbusd(isum[c], wu, simd::broadcast4(x.qs[c] + 32 * b + 4 * g));
    }
  }
  static __m256i finish(__m256i isum, int32_t) { return isum; }
#if defined(__AVX512F__)
  static constexpr size_t kOffsetField = offsetof(ActBlockQ8Tile, offset_q8_0);
  template <int C>
  [[gnu::always_inline]] static void pair_block_sums(const uint8_t* qa, const uint8_t* qb, const TileBlocks& x,
                                                     __m512i* isum) {
    const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
      const __m512i wu = _mm512_xor_si512(join_strips(qa + 32 * g, qb + 32 * g), bias);
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) isum[c] = simd::dpbusd_bcst(isum[c], wu, x.qs(c) + 4 * g);
    }
  }
#endif
};

// Q4_0 with vpdpbusd: the nibbles are the unsigned operand as they are, the
// offset 8 comes back as 8 sum(x) per token, as in Q4Maddubs.
struct Q4Vnni {
  static constexpr int64_t kQuantBytes = kQ4StripQuantBytes;
  static constexpr int64_t kPrefetchAhead = 16;
  template <int C>
  [[gnu::always_inline]] static void block_sums(const uint8_t* q, const TokenActs<C>& x, int64_t b, __m256i* isum) {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) isum[c] = _mm256_set1_epi32(-8 * x.sum[c][b]);
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      const __m256i bytes = _mm256_load_si256(reinterpret_cast<const __m256i*>(q + 32 * v));
      const __m256i lo = _mm256_and_si256(bytes, low4);                         // values 4v..4v+3
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4);  // values 16+4v..
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) {
        const int8_t* xb = x.qs[c] + 32 * b + 4 * v;
        isum[c] = simd::dpbusd(isum[c], lo, simd::broadcast4(xb));
        isum[c] = simd::dpbusd(isum[c], hi, simd::broadcast4(xb + 16));
      }
    }
  }
  static __m256i finish(__m256i isum, int32_t) { return isum; }
#if defined(__AVX512F__)
  static constexpr size_t kOffsetField = offsetof(ActBlockQ8Tile, offset_q4_0);
  template <int C>
  [[gnu::always_inline]] static void pair_block_sums(const uint8_t* qa, const uint8_t* qb, const TileBlocks& x,
                                                     __m512i* isum) {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      const __m512i bytes = join_strips(qa + 32 * v, qb + 32 * v);
      const __m512i lo = _mm512_and_si512(bytes, low4);
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), low4);
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) {
        isum[c] = simd::dpbusd_bcst(isum[c], lo, x.qs(c) + 4 * v);
        isum[c] = simd::dpbusd_bcst(isum[c], hi, x.qs(c) + 16 + 4 * v);
      }
    }
  }
#endif
};
#endif  // KVLM_VNNI

// This path's dot step for each format.
#if KVLM_VNNI
using Q8Dot = Q8Vnni;
using Q4Dot = Q4Vnni;
#else
using Q8Dot = Q8Maddubs;
using Q4Dot = Q4Maddubs;
#endif

// acc[c] lane k += dot(row k of the strip, token t0 + c) over blocks [b0, b1)
// (b0 == 0 starts the float chain at 0; later ranges go on where the last
// call left it): Dot's integer sums, then the fixed float step.
template <typename Dot, int C>
[[gnu::always_inline]] inline void tile(StripAt strip, const MatmulActs& a, int64_t t0, int64_t b0, int64_t b1,
                                        __m256* acc_io) {
  const PairedStrip<Dot::kQuantBytes> s(strip);
  const TokenActs<C> x(a, t0);
  __m256 acc[C];
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c) acc[c] = b0 == 0 ? _mm256_setzero_ps() : acc_io[c];
  for (int64_t b = b0; b < b1; ++b) {
    prefetch_tile<C, Dot::kPrefetchAhead>(s, b);
    __m256i isum[C];
    Dot::template block_sums<C>(s.q(b), x, b, isum);
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s.d(b))));
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      const __m256 scale = _mm256_mul_ps(dw, _mm256_broadcast_ss(x.d[c] + b));
      acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(Dot::finish(isum[c], x.sum[c][b])), scale, acc[c]);
    }
  }
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c) acc_io[c] = acc[c];
}

#if KVLM_VNNI && defined(__AVX512F__)
// tile on 16 rows at once (for_each_strip_pair): strip a's 8 rows in the low
// 256 bits, strip b's in the high, the same integer sums and float steps per
// lane. A zmm vpdpbusd does twice a ymm one's work for the same activation
// broadcast and issue slot (on the Xeons we measure, ymm VNNI reaches ~97 G
// and zmm ~130 G multiply-adds per second and core).
template <typename Dot, int C>
void pair_tile(StripAt first, StripAt second, const MatmulActs& a, int64_t t0, __m512* out, StripAt next,
               bool cold) {
  const int64_t num_blocks = a.cols / 32;
  using Strip = PairedStrip<Dot::kQuantBytes>;
  const Strip sa(first), sb(second);
  TileBlocks x(a, t0);
  const __m512i start = _mm512_set1_epi32(kFloatBias);
  __m512 acc[C];
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  for (int64_t b = 0; b < num_blocks; ++b, x.at += x.stride) {
    const uint8_t* qa = sa.q(b);
    const uint8_t* qb = sb.q(b);
    if (prefetch_far_tile<C>(cold)) {
      prefetch_far(qa, Strip::kStride);
    } else if (prefetch_strips<C>()) {
      prefetch_pair<Dot::kPrefetchAhead>(sa, sb, first, second, next, b, num_blocks);
    }
    __m512i isum[C];  // from kFloatBias; |sum| < 2^20
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) isum[c] = start;
    Dot::template pair_block_sums<C>(qa, qb, x, isum);
    block_steps<C>(x, Dot::kOffsetField, isum, join_scales(sa.d(b), sb.d(b)), acc);
  }
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c) out[c] = acc[c];
}
#endif  // KVLM_VNNI && __AVX512F__

// The kernel of one 32-value format: the pair tiles where AVX-512 VNNI
// has them, else 8-row tiles over chunks of kChunkBlocks blocks.
template <typename Dot, int64_t kChunkBlocks>
void run_kernel(const WeightMatrix& w, const MatmulActs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1,
                float* y) {
  const int64_t num_blocks = w.cols / 32;
  auto range = [&]<int C>(StripAt strip, int64_t t, int64_t b0, int64_t b1, __m256* acc) {
    tile<Dot, C>(strip, a, t, b0, b1, acc);
  };
#if KVLM_VNNI && defined(__AVX512F__)
  for_each_strip_pair<kMaxTile>(
      w, r0, r1, t0, t1, y,
      [&]<int C>(StripAt sa, StripAt sb, int64_t t, __m512* out, StripAt next, bool cold) {
        pair_tile<Dot, C>(sa, sb, a, t, out, next, cold);
      },
      whole_strip(range, num_blocks));
#else
  for_each_strip_chunked<kMaxTile, kChunkBlocks>(w, r0, r1, t0, t1, y, num_blocks, range);
#endif
}

}  // namespace

size_t strip_bytes_q8_0(int64_t cols) { return strip_bytes_for(cols, kQ8StripQuantBytes); }
size_t strip_bytes_q4_0(int64_t cols) { return strip_bytes_for(cols, kQ4StripQuantBytes); }

void kernel_q8_0(const WeightMatrix& w, const MatmulActs& a, int64_t r0, int64_t r1, int64_t t0,
                 int64_t t1, float* y) {
  run_kernel<Q8Dot, 16>(w, a, r0, r1, t0, t1, y);
}

void kernel_q4_0(const WeightMatrix& w, const MatmulActs& a, int64_t r0, int64_t r1, int64_t t0,
                 int64_t t1, float* y) {
  run_kernel<Q4Dot, 32>(w, a, r0, r1, t0, t1, y);
}

// This path's packed layouts; the K-quant ones live in matmul_k.cpp, the float ones in matmul_float.cpp.
size_t packed_strip_bytes(DType t, int64_t cols) {
  switch (t) {
    case DType::kQ8_0: return strip_bytes_q8_0(cols);
    case DType::kQ4_0: return strip_bytes_q4_0(cols);
    case DType::kQ4_K: return strip_bytes_q4_k(cols);
    case DType::kQ6_K: return strip_bytes_q6_k(cols);
    case DType::kF32: return strip_bytes_f32(cols);
    case DType::kF16:
    case DType::kBF16: return strip_bytes_half(cols);
    default: return 0;
  }
}

StripPacker strip_packer(DType t) {
  switch (t) {
    case DType::kQ8_0: return pack_strip_q8_0;
    case DType::kQ4_0: return pack_strip_q4_0;
    case DType::kQ4_K: return pack_strip_q4_k;
    case DType::kQ6_K: return pack_strip_q6_k;
    case DType::kF32: return pack_strip_f32;
    case DType::kF16:
    case DType::kBF16: return pack_strip_half;
    default: return nullptr;
  }
}

}  // namespace KVLM_KERNEL_ISA
#else  // the scalar twins, built once without ISA flags

void kernel_q8_0_scalar(const WeightMatrix& w, const MatmulActs& a, int64_t r0, int64_t r1, int64_t t0,
                        int64_t t1, float* y) {
  run_scalar<BlockQ8_0>(w, a, r0, r1, t0, t1, y);
}

void kernel_q4_0_scalar(const WeightMatrix& w, const MatmulActs& a, int64_t r0, int64_t r1, int64_t t0,
                        int64_t t1, float* y) {
  run_scalar<BlockQ4_0>(w, a, r0, r1, t0, t1, y);
}

#endif  // KVLM_KERNEL_ISA

}  // namespace kvlm::cpu
