// matmul kernels for float weights (F32, F16, BF16) against f32 activations.
// Half-precision weights are widened to f32 in registers; activations stay
// f32 (more accurate than ggml, which rounds activations to f16 for F16).
//
// A tile is kRows weight rows x up to kMaxTile tokens of 8-lane accumulators:
// every loaded weight vector meets kMaxTile tokens and every activation
// vector kRows rows, so a step of 8 columns costs kRows + kMaxTile loads for
// kRows * kMaxTile FMAs. Per (row, token) the sum follows the fixed recipe of
// matmul_impl.h (lane k sums columns k mod 8, hsum8, then the tail), whatever
// the tile shape, so results are batch-invariant.
//
// The SIMD paths read the weights packed at load (pack_for_matmul), 8 rows a
// strip: [8-column group][row pair p][16 values: the group's 8 columns of
// row 2p, then of row 2p + 1], then the columns past the last multiple of 8,
// row by row. A band of 8 rows is then one contiguous stream, in the order
// the kernels consume it; read as 8 rows 4 KiB apart, a Zen 5 core read F16
// weights at ~20 GB/s against ~30 as one stream (bench/stream_read.c), and
// F16 decode of TinyLlama's shape on one thread went from 8.1 to 9.9
// tokens/s (2026-12-01). The scalar twins read the GGUF rows.
#include <cmath>
#include <cstring>

#include "backend/cpu/matmul_impl.h"
#include "backend/cpu/simd.h"
#include "backend/fp16.h"

namespace kvlm::cpu {
namespace {

#if KVLM_AVX2 && defined(__AVX512F__) && defined(__AVX512DQ__)
// AVX-512: one zmm holds the 8 lanes of two rows (low half row r, high half
// row r + 1) against one token's 8 activations broadcast to both halves, so
// each lane keeps its own scalar chain (the recipe of matmul_impl.h) while
// one instruction does 16 FMAs. 8 rows x 6 tokens: 24 zmm accumulators, 4
// weight and 1 activation register of the 32; 10 loads per 24 FMAs, and
// the whole band is one row tile, so a token tile's activations come from L2
// once per pass (with 4-row tiles, twice).
#define KVLM_ZMM 1
constexpr int kRows = 8;
[[maybe_unused]] constexpr int kMaxTile = 6;
#else
// 2 x 6 accumulators, 2 weight vectors and 1 activation vector: 15 of the 16
// ymm registers, 8 loads per 12 FMAs; 2 rows divide the driver's 8-row chunks.
#define KVLM_ZMM 0
constexpr int kRows = 2;
[[maybe_unused]] constexpr int kMaxTile = 6;
#endif
// Rows whose weights of one column pass stay in L1 (one band), and the bytes
// of weights per pass: 8 rows x 256 columns of F32 (512 of F16) is 8 KiB, a
// token tile of 256 (512) columns 6 (12) KiB. The 8-lane partial sums wait in
// memory between passes, which changes nothing in their order.
constexpr int kBandRows = 8;
[[maybe_unused]] constexpr int64_t kBandPassBytes = 8 * 1024;
[[maybe_unused]] constexpr int kMaxTiles = 16;  // token tiles of partial sums held at a time
static_assert(kBandRows % kRows == 0, "a band is whole row tiles");
static_assert(kBandRows == kStripRows, "a band is one packed strip");

// Loaders: one weight as a scalar (the GGUF rows of the scalar twin and the
// tail columns), 8 or 16 consecutive packed weights as f32 lanes.
struct LoadF32 {
  static constexpr size_t kBytes = 4;
  static float scalar(const uint8_t* w, int64_t i) {
    float v;
    std::memcpy(&v, w + i * 4, 4);
    return v;
  }
#if KVLM_AVX2
  static __m256 vec(const uint8_t* p) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
#endif
#if KVLM_ZMM
  static __m512 vec16(const uint8_t* p) { return _mm512_loadu_ps(reinterpret_cast<const float*>(p)); }
#endif
};

struct LoadF16 {
  static constexpr size_t kBytes = 2;
  static float scalar(const uint8_t* w, int64_t i) {
    uint16_t h;
    std::memcpy(&h, w + i * 2, 2);
    return fp16_to_f32(h);
  }
#if KVLM_AVX2
  static __m256 vec(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
#endif
#if KVLM_ZMM
  static __m512 vec16(const uint8_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
#endif
};

struct LoadBF16 {
  static constexpr size_t kBytes = 2;
  static float scalar(const uint8_t* w, int64_t i) {
    uint16_t h;
    std::memcpy(&h, w + i * 2, 2);
    return bf16_to_f32(h);
  }
#if KVLM_AVX2
  static __m256 vec(const uint8_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
#endif
#if KVLM_ZMM
  static __m512 vec16(const uint8_t* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
#endif
};

// The fixed reduction of the 8 lanes: (l0 + l4) + (l2 + l6), then (l1 + l5) + (l3 + l7), summed.
[[maybe_unused]] inline float hsum8(const float* l) {
  const float a0 = l[0] + l[4];
  const float a1 = l[1] + l[5];
  const float a2 = l[2] + l[6];
  const float a3 = l[3] + l[7];
  return (a0 + a2) + (a1 + a3);
}

// Scalar twin: the recipe of matmul_impl.h, one (row, token) at a time.
template <typename Load>
void run_scalar(const WeightMatrix& w, const MatmulActs& acts, int64_t row_begin, int64_t row_end,
                int64_t tok_begin, int64_t tok_end, float* y) {
  const int64_t n = w.cols;
  const int64_t n8 = n / 8 * 8;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint8_t* wr = static_cast<const uint8_t*>(w.data) + static_cast<size_t>(r * n) * Load::kBytes;
    for (int64_t t = tok_begin; t < tok_end; ++t) {
      const float* x = acts.f32 + t * n;
      float lanes[8] = {};
      for (int64_t i = 0; i < n8; i += 8) {
        for (int k = 0; k < 8; ++k) lanes[k] = std::fma(Load::scalar(wr, i + k), x[i + k], lanes[k]);
      }
      float sum = hsum8(lanes);
      for (int64_t i = n8; i < n; ++i) sum = std::fma(Load::scalar(wr, i), x[i], sum);
      y[t * w.rows + r] = sum;
    }
  }
}

#if KVLM_AVX2

// A band of kBandRows rows as its packed strip holds them (strip_of).
// Column i (a multiple of 8) of row k starts at band_value(k, i) values into
// the band; tail column n8 + j of row k at n8 * 8 + k * (n - n8) + j.
[[maybe_unused]] constexpr int64_t kGroupValues = kBandRows * 8;  // one 8-column group of the band
inline int64_t band_value(int k, int64_t i) { return i * kBandRows + (k / 2) * 16 + (k % 2) * 8; }

// The packed strip of 8 rows of `value_bytes` values (PackedWeights; the
// layout above), whole 64-byte lines.
size_t float_strip_bytes(size_t value_bytes, int64_t cols) {
  return (static_cast<size_t>(cols) * kBandRows * value_bytes + 63) / 64 * 64;
}

template <size_t kBytes>
void pack_float_strip(const uint8_t* const* rows, int64_t cols, uint8_t* out) {
  const int64_t n8 = cols / 8 * 8;
  for (int64_t i = 0; i < n8; i += 8)
    for (int k = 0; k < kBandRows; ++k) std::memcpy(out + band_value(k, i) * kBytes, rows[k] + i * kBytes, 8 * kBytes);
  uint8_t* tail = out + n8 * kBandRows * kBytes;
  const auto tail_bytes = static_cast<size_t>(cols - n8) * kBytes;
  for (int k = 0; k < kBandRows; ++k) std::memcpy(tail + k * tail_bytes, rows[k] + n8 * kBytes, tail_bytes);
}

// acc[r][c] += the 8-lane products of columns [i0, i1) (multiples of 8) of
// band rows k0 .. k0 + R - 1 and tokens x + c * n.
template <typename Load, int R, int C>
inline void accumulate_tile(const uint8_t* band, int k0, const float* x, int64_t n, int64_t i0, int64_t i1,
                            __m256 (*acc)[kMaxTile]) {
  __m256 a[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) a[r][c] = acc[r][c];
  for (int64_t i = i0; i < i1; i += 8) {
    // Named and pinned in registers (as xv below): GCC would fold an F32
    // row's load into all C FMAs, and kept an array of them on the stack.
    static_assert(R == 1 || R == 2, "accumulate_tile names at most two rows");
    __m256 w0 = Load::vec(band + band_value(k0, i) * Load::kBytes);
    __m256 w1 = R == 2 ? Load::vec(band + band_value(k0 + 1, i) * Load::kBytes) : w0;
    asm("" : "+x"(w0), "+x"(w1));
    const __m256 wv[2] = {w0, w1};
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      __m256 xv = _mm256_loadu_ps(x + c * n + i);
      // Keep xv in a register: GCC would fold the load into each of the R
      // FMAs, and the loads, not the FMAs, would bound the loop.
      asm("" : "+x"(xv));
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) a[r][c] = _mm256_fmadd_ps(wv[r], xv, a[r][c]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[r][c] = a[r][c];
}

#if KVLM_ZMM
constexpr int kPairs = kRows / 2;
static_assert(kPairs == 4 && kRows == kBandRows, "accumulate_pairs names the band's four row pairs");

// accumulate_tile for the band's kRows rows: rows 2h and 2h + 1 share zmm
// a[h][c] (and acc[h][c] between calls: row 2h's 8 lanes low, row 2h + 1's
// high), the 16 values pair h has in each 8-column group of the packed band.
// `group` points at the band's group of columns [i0, i0 + 8), in values of
// kBytes; Load::vec16 widens 16 of them.
template <typename Load, int C>
inline void accumulate_pairs(const uint8_t* group, const float* x, int64_t n, int64_t i0, int64_t i1,
                             __m512 (*acc)[kMaxTile]) {
  __m512 a[kPairs][C];
#pragma GCC unroll 4
  for (int h = 0; h < kPairs; ++h)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) a[h][c] = acc[h][c];
  constexpr size_t kPairBytes = 16 * Load::kBytes;
  for (int64_t i = i0; i < i1; i += 8, group += kGroupValues * Load::kBytes) {
    // Named registers, not an array (GCC kept a stack copy of one), and
    // pinned there: where the weights are plain loads (F32, the widened
    // band) GCC would fold them into every FMA, C loads instead of one, and
    // the load ports, not the FMAs, would bound the loop.
    __m512 w0 = Load::vec16(group), w1 = Load::vec16(group + kPairBytes);
    __m512 w2 = Load::vec16(group + 2 * kPairBytes), w3 = Load::vec16(group + 3 * kPairBytes);
    asm("" : "+v"(w0), "+v"(w1), "+v"(w2), "+v"(w3));
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      __m512 xv = _mm512_broadcast_f32x8(_mm256_loadu_ps(x + c * n + i));
      asm("" : "+v"(xv));  // one broadcast load per token, not one per FMA
      a[0][c] = _mm512_fmadd_ps(w0, xv, a[0][c]);
      a[1][c] = _mm512_fmadd_ps(w1, xv, a[1][c]);
      a[2][c] = _mm512_fmadd_ps(w2, xv, a[2][c]);
      a[3][c] = _mm512_fmadd_ps(w3, xv, a[3][c]);
    }
  }
#pragma GCC unroll 4
  for (int h = 0; h < kPairs; ++h)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[h][c] = a[h][c];
}

// The band's columns [i0, i1) widened to f32 once, in the same order, where
// widening costs FMA ports (kWidenInLoop false): with several token tiles per
// pass every tile would otherwise widen the same weights again. The values
// are exact, so the sums are the same bits either way.
template <typename Load>
void widen_band(const uint8_t* band, int64_t i0, int64_t i1, float* out) {
  const uint8_t* from = band + band_value(0, i0) * Load::kBytes;
  for (int64_t v = 0; v < (i1 - i0) * kBandRows; v += 16) _mm512_store_ps(out + v, Load::vec16(from + v * Load::kBytes));
}
#endif

// Partial sums of one band: [token tile][row tile], up to kMaxTiles * kMaxTile tokens.
#if KVLM_ZMM
using BandSums = __m512[kMaxTiles][kBandRows / kRows][kPairs][kMaxTile];
inline __m512 zero_sums() { return _mm512_setzero_ps(); }

// hsum8 of all 8 rows of the band for token c of tile tt, as one vector
// (row k in lane k), with hsum8's additions in its order: one 32-byte store
// per token instead of 8 scalar ones a line apart (the scalar epilogue was
// 5% of F16 prefill's kernel time in perf). A zmm holds rows 2h | 2h + 1.
inline __m256 band_sums(const BandSums& acc, int tt, int c) {
  const __m512 z0 = acc[tt][0][0][c], z1 = acc[tt][0][1][c], z2 = acc[tt][0][2][c], z3 = acc[tt][0][3][c];
  // Lanes (k, k + 4): quarters [row 0, row 1, row 2, row 3] and [row 4 .. row 7].
  const __m512 s03 = _mm512_add_ps(_mm512_shuffle_f32x4(z0, z1, _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_f32x4(z0, z1, _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512 s47 = _mm512_add_ps(_mm512_shuffle_f32x4(z2, z3, _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_f32x4(z2, z3, _MM_SHUFFLE(3, 1, 3, 1)));
  // Lanes (k, k + 2): quarter j = [row j: t0, t1, row j + 4: t0, t1].
  const __m512 t = _mm512_add_ps(_mm512_shuffle_ps(s03, s47, _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_ps(s03, s47, _MM_SHUFFLE(3, 2, 3, 2)));
  // Lanes (0, 1): row j's sum in lane 4j, row j + 4's in lane 4j + 2.
  const __m512 r = _mm512_add_ps(t, _mm512_permute_ps(t, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm512_castps512_ps256(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 2, 6, 10, 14, 0, 0, 0, 0, 0, 0, 0, 0), r));
}
#else
using BandSums = __m256[kMaxTiles][kBandRows / kRows][kRows][kMaxTile];
// Row k's 8 lanes of partial sums for token c of one token tile.
inline __m256 row_sums(const BandSums& acc, int tt, int k, int c) { return acc[tt][k / kRows][k % kRows][c]; }
inline __m256 zero_sums() { return _mm256_setzero_ps(); }

// As the AVX-512 band_sums, from 8 ymm (one a row).
inline __m256 band_sums(const BandSums& acc, int tt, int c) {
  __m256 s[4];  // lanes (k, k + 4): s[p] = [row 2p | row 2p + 1]
  for (int p = 0; p < 4; ++p) {
    const __m256 a = row_sums(acc, tt, 2 * p, c), b = row_sums(acc, tt, 2 * p + 1, c);
    s[p] = _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
  }
  // Lanes (k, k + 2): t0 = [rows 0, 2 | rows 1, 3], t1 the same for rows 4-7, as (t0, t1) pairs.
  const __m256 t0 = _mm256_add_ps(_mm256_shuffle_ps(s[0], s[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm256_shuffle_ps(s[0], s[1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m256 t1 = _mm256_add_ps(_mm256_shuffle_ps(s[2], s[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm256_shuffle_ps(s[2], s[3], _MM_SHUFFLE(3, 2, 3, 2)));
  // Lanes (0, 1): [rows 0, 2, 4, 6 | rows 1, 3, 5, 7].
  const __m256 r = _mm256_add_ps(_mm256_shuffle_ps(t0, t1, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm256_shuffle_ps(t0, t1, _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}
#endif

// acc += the band's rows' products with the token tile x (C tokens) over
// columns [i0, i1).
template <typename Load, int C>
inline void accumulate_band(const uint8_t* band, const float* x, int64_t n, int64_t i0, int64_t i1,
                            BandSums& acc, int tt) {
#if KVLM_ZMM
  accumulate_pairs<Load, C>(band + band_value(0, i0) * Load::kBytes, x, n, i0, i1, acc[tt][0]);
#else
  for (int rt = 0; rt < kBandRows / kRows; ++rt) accumulate_tile<Load, 2, C>(band, kRows * rt, x, n, i0, i1, acc[tt][rt]);
#endif
}

// Columns per slice of a one-tile band (decode): each slice's share of the
// next band is prefetched before it, about the bytes the slice itself reads.
constexpr int64_t kStreamSliceCols = 64;

// Whether the next band is prefetched in software. On the Xeon it was
// measured on, the hardware prefetchers stop at every 4 KiB page end and the
// software prefetch took F16 decode from 76-84% to 86% of the read bandwidth.
// On a Zen 5 (2026-12-01) the hardware prefetchers keep up alone and the
// prefetches cost: F16 decode of TinyLlama's shape read 14.2-14.5 tokens/s
// without them against 13.8-14.1 with (2 threads, 4 alternated runs), 9.2
// against 8.4 on one thread. Addresses only: the sums are the same bits.
inline const bool kPrefetchNextBand = !cpu_is_amd();

// Whether half-precision weights are widened to f32 in the loop that
// multiplies them, rather than once a pass for every token tile to read.
// On a Zen 5 the conversions issue beside the FMAs: in a probe of the 8-row
// x 6-token tile from L1, 4 vcvtph2ps per 24 FMAs ran at the same 3.4-3.5 G
// FMA/s as 4 f32 loads. The pass then skips the widening (4.8% of F16
// prefill's kernel time, its stores missing L1) and keeps half the bytes
// in L1. F16 prefill of TinyLlama's shape 76-91 -> 86-92 tokens/s (7
// alternated runs, 1,024-column passes); 4096 x 4096 x 64 and 256 tokens on
// one core: F16 +1-5%, BF16 +5%. Passes of 2,048 columns (a whole row of
// TinyLlama's attention and gate/up matrices): 89-97 against 81-95 tokens/s
// (11 alternated runs; whole rows of every matrix 91-97), though on one core
// at 4096 x 4096 x 64 tokens 1,024 columns ran 7% faster. On Intel cores the
// conversions take the FMA ports (vcvtph2ps p0 + p5, vpmovzxwd p5), so
// widening once stays.
inline const bool kWidenInLoop = cpu_is_amd();
constexpr int64_t kLoopWidenPassBytes = 32 * 1024;

// One token tile (decode, or a batch of up to kMaxTile tokens): the band
// streams once, in column slices, while the next band (next_band, next_len
// bytes) is prefetched at the pace this one is read.
template <typename Load>
void stream_band(const uint8_t* band, const float* x, int64_t n, int num, BandSums& acc, const uint8_t* next_band,
                 size_t next_len) {
  const int64_t n8 = n / 8 * 8;
  dispatch_tile<kMaxTile>(num, [&]<int C>() {
    for (int64_t i0 = 0; i0 < n8; i0 += kStreamSliceCols) {
      const int64_t i1 = std::min(n8, i0 + kStreamSliceCols);
      if (kPrefetchNextBand && next_band != nullptr) {
        const size_t from = next_len * static_cast<size_t>(i0) / static_cast<size_t>(n8) / 64 * 64;
        const size_t to = i1 == n8 ? next_len : next_len * static_cast<size_t>(i1) / static_cast<size_t>(n8) / 64 * 64;
        simd::prefetch(next_band + from, to - from);
      }
      accumulate_band<Load, C>(band, x, n, i0, i1, acc, 0);
    }
  });
}

// The band after this one, for prefetching: the next strip of the matrix
// (nullptr past its last), and whether the caller's row range holds it.
struct NextBand {
  const uint8_t* bytes;
  size_t len;
  bool in_range;
};

// Adds the products of the band's rows and tokens [t0, t1) to sums, pass by
// pass over the columns.
template <typename Load>
void band_passes(const uint8_t* band, const float* x0, int64_t n, int64_t t0, int64_t t1, BandSums& acc,
                 [[maybe_unused]] float* wide_band, const NextBand& next) {
  const int64_t n8 = n / 8 * 8;
  const int num_tiles = static_cast<int>((t1 - t0 + kMaxTile - 1) / kMaxTile);
  if (num_tiles == 1) {
    stream_band<Load>(band, x0 + t0 * n, n, static_cast<int>(t1 - t0), acc, next.in_range ? next.bytes : nullptr,
                      next.len);
    return;
  }
  // Column passes: the band's weights and one token tile's activations
  // stay in L1 while the band meets every token tile.
  const bool widen_in_loop = Load::kBytes == 2 && kWidenInLoop;
  const int64_t pass_bytes = widen_in_loop ? kLoopWidenPassBytes : kBandPassBytes;
  const int64_t col_block = pass_bytes / (kBandRows * static_cast<int64_t>(Load::kBytes));
  for (int64_t i0 = 0; i0 < n8; i0 += col_block) {
    const int64_t i1 = std::min(n8, i0 + col_block);
    // The band's next pass, while this one computes (see simd::prefetch): a
    // share before each token tile, as one burst of them all stalls on the
    // line fill buffers (6% of prefill in perf). During the last pass, the
    // next band's first, even past the caller's rows: ChunkRegions hands a
    // thread the chunk after its last, and a first pass read from DRAM on
    // demand cost 8% of F16 prefill's kernel time in perf.
    const bool last_pass = i1 == n8;
    const uint8_t* next_pass = last_pass ? next.bytes : band + band_value(0, i1) * Load::kBytes;
    const size_t next_bytes =
        next_pass == nullptr ? 0
                             : static_cast<size_t>(std::min(col_block, last_pass ? n8 : n8 - i1) * kBandRows) * Load::kBytes;
#if KVLM_ZMM
    // Half weights widened once a pass, or where they are multiplied
    // (widen_in_loop); F32 is its own widened form.
    const bool widen_pass = Load::kBytes != 4 && !widen_in_loop;
    if (widen_pass) widen_band<Load>(band, i0, i1, wide_band);
#endif
    for (int tt = 0; tt < num_tiles; ++tt) {
      const int64_t t = t0 + tt * kMaxTile;
      const int num = static_cast<int>(std::min<int64_t>(kMaxTile, t1 - t));
      const float* x = x0 + t * n;
      if (next_bytes != 0) {
        const size_t from = next_bytes * tt / num_tiles / 64 * 64;
        const size_t to = tt + 1 == num_tiles ? next_bytes : next_bytes * (tt + 1) / num_tiles / 64 * 64;
        simd::prefetch(next_pass + from, to - from);
      }
      dispatch_tile<kMaxTile>(num, [&]<int C>() {
#if KVLM_ZMM
        if (widen_pass) {
          accumulate_pairs<LoadF32, C>(reinterpret_cast<const uint8_t*>(wide_band), x, n, i0, i1, acc[tt][0]);
        } else {
          accumulate_pairs<Load, C>(band + band_value(0, i0) * Load::kBytes, x, n, i0, i1, acc[tt][0]);
        }
#else
        accumulate_band<Load, C>(band, x, n, i0, i1, acc, tt);
#endif
      });
    }
  }
}

template <typename Load>
void run(const WeightMatrix& w, const MatmulActs& acts, int64_t row_begin, int64_t row_end,
         int64_t tok_begin, int64_t tok_end, float* y) {
  const int64_t n = w.cols;
  const int64_t n8 = n / 8 * 8;
  const size_t band_bytes = float_strip_bytes(Load::kBytes, n);
  BandSums acc;  // kept across the column passes
  // One pass of the band's weights as f32 (widen_band): at most 512 columns
  // (F16/BF16) of 8 rows, 16 KiB.
  alignas(64) float wide_band[KVLM_ZMM ? kBandRows * (kBandPassBytes / (kBandRows * 2)) : 1];
  for (int64_t r0 = row_begin; r0 < row_end; r0 += kBandRows) {
    const int num_rows = static_cast<int>(std::min<int64_t>(kBandRows, row_end - r0));
    const int64_t s = r0 / kBandRows;
    const uint8_t* band = KVLM_KERNEL_ISA::strip_of(w, s).bytes;  // packed now if w has no packed copy
    const PackedWeights* packed = packed_weights(w);
    const bool has_next = packed && r0 + kBandRows < w.rows;
    const NextBand next{has_next ? packed->strip(s + 1).bytes : nullptr, band_bytes, r0 + kBandRows < row_end};
    const uint8_t* tail = band + n8 * kBandRows * Load::kBytes;
    for (int64_t t0 = tok_begin; t0 < tok_end; t0 += kMaxTiles * kMaxTile) {
      const int64_t t1 = std::min(tok_end, t0 + kMaxTiles * kMaxTile);
      const int num_tiles = static_cast<int>((t1 - t0 + kMaxTile - 1) / kMaxTile);
      for (int tt = 0; tt < num_tiles; ++tt)
        for (auto& tile : acc[tt])
          for (auto& row : tile)
            for (auto& v : row) v = zero_sums();
      band_passes<Load>(band, acts.f32, n, t0, t1, acc, wide_band, next);
      for (int64_t t = t0; t < t1; ++t) {
        const __m256 sums = band_sums(acc, static_cast<int>((t - t0) / kMaxTile), static_cast<int>((t - t0) % kMaxTile));
        float* out = y + t * w.rows + r0;
        if (num_rows == kBandRows && n8 == n) {
          _mm256_storeu_ps(out, sums);
          continue;
        }
        alignas(32) float sum[kBandRows];
        _mm256_store_ps(sum, sums);
        const float* x = acts.f32 + t * n;
        for (int k = 0; k < num_rows; ++k) {
          for (int64_t i = n8; i < n; ++i) sum[k] = std::fma(Load::scalar(tail + k * (n - n8) * Load::kBytes, i - n8), x[i], sum[k]);
          out[k] = sum[k];
        }
      }
    }
  }
}

#endif  // KVLM_AVX2

}  // namespace

#if defined(KVLM_KERNEL_ISA) && KVLM_AVX2
namespace KVLM_KERNEL_ISA {

void kernel_f32(const WeightMatrix& w, const MatmulActs& a, int64_t r0, int64_t r1, int64_t t0,
                int64_t t1, float* y) {
  run<LoadF32>(w, a, r0, r1, t0, t1, y);
}
void kernel_f16(const WeightMatrix& w, const MatmulActs& a, int64_t r0, int64_t r1, int64_t t0,
                int64_t t1, float* y) {
  run<LoadF16>(w, a, r0, r1, t0, t1, y);
}
void kernel_bf16(const WeightMatrix& w, const MatmulActs& a, int64_t r0, int64_t r1, int64_t t0,
                 int64_t t1, float* y) {
  run<LoadBF16>(w, a, r0, r1, t0, t1, y);
}

// The packed float layouts: F16 and BF16 share theirs (2-byte values copied as they are).
size_t strip_bytes_f32(int64_t cols) { return float_strip_bytes(4, cols); }
size_t strip_bytes_half(int64_t cols) { return float_strip_bytes(2, cols); }
void pack_strip_f32(const uint8_t* const* rows, int64_t cols, uint8_t* out, int /*slot*/) {
  pack_float_strip<4>(rows, cols, out);
}
void pack_strip_half(const uint8_t* const* rows, int64_t cols, uint8_t* out, int /*slot*/) {
  pack_float_strip<2>(rows, cols, out);
}

}  // namespace KVLM_KERNEL_ISA
#elif !defined(KVLM_KERNEL_ISA)  // the scalar twins, built once without ISA flags

void kernel_f32_scalar(const WeightMatrix& w, const MatmulActs& a, int64_t r0, int64_t r1, int64_t t0,
                       int64_t t1, float* y) {
  run_scalar<LoadF32>(w, a, r0, r1, t0, t1, y);
}
void kernel_f16_scalar(const WeightMatrix& w, const MatmulActs& a, int64_t r0, int64_t r1, int64_t t0,
                       int64_t t1, float* y) {
  run_scalar<LoadF16>(w, a, r0, r1, t0, t1, y);
}
void kernel_bf16_scalar(const WeightMatrix& w, const MatmulActs& a, int64_t r0, int64_t r1, int64_t t0,
                        int64_t t1, float* y) {
  run_scalar<LoadBF16>(w, a, r0, r1, t0, t1, y);
}

#endif  // KVLM_KERNEL_ISA

}  // namespace kvlm::cpu
