// Internals of matmul(): the activation formats prepared once per call, the
// packed weight layout, and the per-dtype kernels that compute a block of
// rows x tokens. Not a public API; only backend/cpu/matmul*.cpp and the
// kernel tests include it.
//
// Batch invariance rests on one rule: every (row, token) output goes through
// the same floating-point operations in the same order, whichever kernel,
// tile, lane or tail computes it. Integer block sums are exact, so only the
// float steps are fixed, per dtype:
//   Q8_0, Q4_0:  acc = fma(float(isum_b), dw_b * dx_b, acc)            per block b
//   Q4_K:        acc = fma(float(sumi_b), d_b * dx_b, acc)
//                acc = fma(-float(summ_b), dmin_b * dx_b, acc)         per super-block
//   Q6_K:        acc = fma(float(sumi_b), d_b * dx_b, acc)             per super-block
//   F32/F16/BF16: 8 partial sums (lane k takes i = k mod 8) by fma up to the
//                last multiple of 8, hsum8() of them, then fma of the tail in order.
// The SIMD kernels hold one such scalar chain per vector lane; the scalar
// twins run the same chain with std::fma (the files are built with
// -ffp-contract=off, so no other product is fused behind our back).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <span>

#include "backend/cpu/cpu_path.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/simd.h"
#include "common/assert.h"
#include "common/huge_pages.h"

namespace kvlm {

// 32 bytes, 32-aligned: the unit of packed and scratch buffers.
struct alignas(32) Bytes32 {
  uint8_t b[32];
};

// One packed strip as the kernels get it (PackedWeights::strip, for_each_strip).
// Paired layouts: `bytes` is the strip's pair and `slot` which strip of the
// pair it is. Others: `bytes` is the strip's own, slot 0.
struct StripAt {
  const uint8_t* bytes = nullptr;
  int slot = 0;
};

// A matrix in strips of 8 rows (kStripRows); strip s holds rows
// 8s .. 8s+7 (the last strip repeats a valid row where the matrix ends; those
// lanes are computed and never stored). The layout inside a strip is the
// dtype's own (matmul_q8.cpp, matmul_k.cpp, matmul_float.cpp).
//
// Paired layouts (paired_strips()): strips 2p and 2p+1 share
// 2 * strip_bytes, interleaved block by block, so that the 16 rows the
// AVX-512 kernels take at once are one contiguous stream. With the strips
// apart (each its quants, then its scales: four streams for 16 rows), a core
// of a Zen 5 read Q4_0 weights at 15 GB/s against 25 GB/s paired, and
// TinyLlama's Q4_0 decode went from 22 to 47 tokens/s on one thread
// (2026-12-01): that CPU reads several streams at once far slower than one.
// The CPU's PreparedMatrix (backend/weight_matrix.h): pack_for_matmul makes it.
struct PackedWeights final : PreparedMatrix {
  size_t strip_bytes = 0;  // a multiple of 32
  int64_t num_strips = 0;
  bool paired = false;
  // [num_strips (paired: rounded up to even) * strip_bytes]: streamed from
  // DRAM at decode, so on 2 MiB pages.
  HugePageBuffer bytes;
  StripAt strip(int64_t s) const {
    if (paired) return {bytes.data() + static_cast<size_t>(s / 2) * 2 * strip_bytes, static_cast<int>(s % 2)};
    return {bytes.data() + static_cast<size_t>(s) * strip_bytes, 0};
  }
};

// w's packed copy, or nullptr. On the CPU only pack_for_matmul sets
// WeightMatrix::packed, so a copy there is a PackedWeights (a checked cast
// would cost a branch per strip in the kernels' loops).
inline const PackedWeights* packed_weights(const WeightMatrix& w) {
  return static_cast<const PackedWeights*>(w.packed.get());
}

namespace cpu {

constexpr int kStripRows = 8;  // one row per 32-bit lane of a ymm register

// Whether the dtype's strips are packed in pairs (PackedWeights): the same on
// every SIMD path, as the layouts are.
inline bool paired_strips(DType t) {
  return t == DType::kQ8_0 || t == DType::kQ4_0 || t == DType::kQ4_K || t == DType::kQ6_K;
}

// Q8_K activations as the K-quant kernels want them: the quants first (32-byte
// aligned), the per-16 sums (Q6_K's -32 offset), the per-32 sums (Q4_K's mins)
// and the f32 scale. Values equal those of quantize_row(kQ8_K).
struct alignas(32) ActBlockQ8K {
  int8_t qs[256];
  int16_t bsums[16];       // sum of qs[16 g .. 16 g + 15]
  int16_t bsum_pairs[8];   // sum of qs[32 j .. 32 j + 31]
  float d;
};

// One token's Q8_0 activation block as the AVX-512 pair kernels read it
// (MatmulActs::q8_tiles): its quants, its scale and the float offsets of
// their VPDPBUSD sums. A kernel starts a block's integer sum from the bits of
// the float 1.5 * 2^23 (kFloatBias), so the sum's bits read as a float are
// 1.5 * 2^23 + the sum exactly (|sum| < 2^22); subtracting offset_q4_0 or
// offset_q8_0 (1.5 * 2^23 + 8 or 128 times the quants' sum, exact too)
// leaves the block's signed dot product, as an exact float, in one vsubps
// whose operand is a broadcast load.
struct ActBlockQ8Tile {
  int8_t qs[32];
  float d;
  float offset_q4_0;  // Q4_0: nibbles 0..15 unsigned, the offset 8 comes back as 8 sum(x)
  float offset_q8_0;  // Q8_0 on VNNI: weights + 128 unsigned, 128 sum(x) comes back
  float pad;
};
static_assert(sizeof(ActBlockQ8Tile) == 48, "ActBlockQ8Tile: 48 bytes, offsets the kernels name");
constexpr int32_t kFloatBias = 0x4B400000;       // the bits of 1.5 * 2^23
constexpr float kFloatBiasValue = 12582912.0f;  // 1.5 * 2^23

// Activations of one call, converted once and shared by every thread.
// Exactly one representation is set, chosen by the weight dtype (Q8_0's
// with its block-major copy where the path's kernels read that).
struct MatmulActs {
  int64_t cols = 0;
  int64_t num_tokens = 0;
  const float* f32 = nullptr;        // F32/F16/BF16 weights: [num_tokens, cols]
  const int8_t* q8_qs = nullptr;     // Q8_0/Q4_0 weights: [num_tokens, cols] quants
  const float* q8_d = nullptr;       //   [num_tokens, cols / 32] scales (fp16-rounded, as f32)
  const int32_t* q8_sum = nullptr;   //   [num_tokens, cols / 32] sum of each block's quants (the offsets of
                                     //   Q4_0 and of the VNNI kernels' unsigned Q8_0)
  const ActBlockQ8Tile* q8_tiles = nullptr;  //   [cols / 32, num_tokens]: the same, block-major, where the
                                             //   path's kernels read it (CpuKernels::act_q8_tiles)
  const ActBlockQ8K* q8k = nullptr;  // Q4_K/Q6_K weights: [num_tokens, cols / 256]
};

// Where quantize_act_q8_0 puts one token's blocks: the token-major arrays
// (qs: cols quants; d, sums: cols / 32), and where `tiles` is set the
// block-major copy too, block b at tiles[b * tile_stride] (in a call of T
// tokens: token t's column of MatmulActs::q8_tiles, stride T).
struct ActQ8Out {
  int8_t* qs = nullptr;
  float* d = nullptr;
  int32_t* sums = nullptr;
  ActBlockQ8Tile* tiles = nullptr;
  int64_t tile_stride = 0;
};

// Token t's ActQ8Out in a call of num_tokens tokens of cols values: its rows
// of the token-major arrays (qs, d, sums as MatmulActs lays them out) and,
// where `tiles` is set, its column of the block-major copy.
inline ActQ8Out act_q8_out_for_token(int8_t* qs, float* d, int32_t* sums, ActBlockQ8Tile* tiles, int64_t cols,
                                     int64_t num_tokens, int64_t t) {
  return {qs + t * cols, d + t * (cols / 32), sums + t * (cols / 32), tiles != nullptr ? tiles + t : nullptr,
          tiles != nullptr ? num_tokens : 0};
}

// A block's tile but its quants: its scale and the offsets of its quants' sum.
inline void set_act_tile_scales(ActBlockQ8Tile& tile, float d, int32_t sum) {
  tile.d = d;
  // Exact: |8 sum| and |128 sum| are below 2^20, far inside float's 2^24.
  tile.offset_q4_0 = kFloatBiasValue + static_cast<float>(8 * sum);
  tile.offset_q8_0 = kFloatBiasValue + static_cast<float>(128 * sum);
  tile.pad = 0.f;
}

// Quantizes one activation row exactly as quantize_row(kQ8_0 / kQ8_K) would
// (same rounding, bit for bit), into the layouts above. These are the scalar
// twins (matmul_acts.cpp); every path has its copy in CpuKernels.
void quantize_act_q8_0(const float* x, int64_t cols, const ActQ8Out& out);
void quantize_act_q8_k(const float* x, int64_t cols, ActBlockQ8K* out);
using ActQ8_0Quantizer = void (*)(const float* x, int64_t cols, const ActQ8Out& out);
using ActQ8KQuantizer = void (*)(const float* x, int64_t cols, ActBlockQ8K* out);

// Computes y[t][r] for rows [row_begin, row_end) and tokens [tok_begin, tok_end).
// row_begin is a multiple of kStripRows; row_end is one too or w.rows.
// y: [num_tokens, w.rows].
using RowRangeKernel = void (*)(const WeightMatrix& w, const MatmulActs& acts, int64_t row_begin,
                                int64_t row_end, int64_t tok_begin, int64_t tok_end, float* y);

// The scalar twins: the GGUF layout, one (row, token) at a time. Built once,
// without any ISA flags, so every CPU can run them.
void kernel_f32_scalar(const WeightMatrix&, const MatmulActs&, int64_t, int64_t, int64_t, int64_t, float*);
void kernel_f16_scalar(const WeightMatrix&, const MatmulActs&, int64_t, int64_t, int64_t, int64_t, float*);
void kernel_bf16_scalar(const WeightMatrix&, const MatmulActs&, int64_t, int64_t, int64_t, int64_t, float*);
void kernel_q8_0_scalar(const WeightMatrix&, const MatmulActs&, int64_t, int64_t, int64_t, int64_t, float*);
void kernel_q4_0_scalar(const WeightMatrix&, const MatmulActs&, int64_t, int64_t, int64_t, int64_t, float*);
void kernel_q4_k_scalar(const WeightMatrix&, const MatmulActs&, int64_t, int64_t, int64_t, int64_t, float*);
void kernel_q6_k_scalar(const WeightMatrix&, const MatmulActs&, int64_t, int64_t, int64_t, int64_t, float*);

// Packs one strip of 8 rows (rows[k]: row k in the GGUF layout, cols values)
// into `out` (strip_bytes(dtype, cols) bytes, 32-aligned; paired layouts:
// slot `slot` of the pair at `out`, 2 * strip_bytes).
using StripPacker = void (*)(const uint8_t* const* rows, int64_t cols, uint8_t* out, int slot);

// The kernels of one CpuPath (cpu_path.h). Every path's kernels compute the
// same bits; the SIMD paths share one packed strip layout, so a matrix
// packed for one of them serves the others.
struct CpuKernels {
  RowRangeKernel f32, f16, bf16, q8_0, q4_0, q4_k, q6_k;
  // Bytes of one packed strip; 0 where the dtype has no packed layout.
  size_t (*strip_bytes)(DType t, int64_t cols);
  StripPacker (*strip_packer)(DType t);  // nullptr where strip_bytes is 0
  ActQ8_0Quantizer act_q8_0;             // quantize_act_q8_0 and _q8_k on this path
  ActQ8KQuantizer act_q8_k;
  bool act_q8_tiles = false;             // whether its Q8_0/Q4_0 kernels read MatmulActs::q8_tiles
};
const CpuKernels& kernels_for(CpuPath path);

// matmul() on the kernels of `path`, which must be supported (cpu_path.h).
// The scalar path reads the GGUF layout directly and never the packed copy.
void matmul_with(CpuPath path, const WeightMatrix& w, const float* x, int64_t num_tokens, float* y);
// matmul_many() on the kernels of `path`; the matrices must share cols and
// the activation form (at most 4 of them).
void matmul_many_with(CpuPath path, std::span<const MatmulJob> jobs, const float* x, int64_t num_tokens);
// matmul_grouped() on the kernels of `path`; every matrix takes f32 inputs.
void matmul_grouped_with(CpuPath path, std::span<const GroupedMatmulJob> jobs);

// The fixed float step of the quantized kernels (see the top of this file).
inline float accumulate_block(float acc, int32_t isum, float scale) {
  return std::fma(static_cast<float>(isum), scale, acc);
}

// Calls fn.template operator()<C>() with C = n, for a runtime tile size n in
// [1, kMax]; only those kMax instantiations are compiled.
template <int kMax, int C = 1, typename Fn>
inline void dispatch_tile(int n, Fn&& fn) {
  if constexpr (C >= kMax) {
    fn.template operator()<kMax>();
  } else {
    if (n == C) {
      fn.template operator()<C>();
    } else {
      dispatch_tile<kMax, C + 1>(n, fn);
    }
  }
}

// A buffer of at least `bytes` (32-aligned) owned by the calling thread, for a
// strip packed on the fly; valid until the thread's next call.
uint8_t* strip_scratch(size_t bytes);

// The SIMD kernels: compiled once per ISA path with that path's flags
// (backend/CMakeLists.txt), each copy in its own namespace (KVLM_KERNEL_ISA:
// avx2, avxvnni, avx512) so that the linker never picks an AVX-512 copy of an inline
// function for another path.
#define KVLM_DECLARE_SIMD_KERNELS                                                                          \
  void kernel_f32(const WeightMatrix&, const MatmulActs&, int64_t, int64_t, int64_t, int64_t, float*);  \
  void kernel_f16(const WeightMatrix&, const MatmulActs&, int64_t, int64_t, int64_t, int64_t, float*);  \
  void kernel_bf16(const WeightMatrix&, const MatmulActs&, int64_t, int64_t, int64_t, int64_t, float*); \
  void kernel_q8_0(const WeightMatrix&, const MatmulActs&, int64_t, int64_t, int64_t, int64_t, float*); \
  void kernel_q4_0(const WeightMatrix&, const MatmulActs&, int64_t, int64_t, int64_t, int64_t, float*); \
  void kernel_q4_k(const WeightMatrix&, const MatmulActs&, int64_t, int64_t, int64_t, int64_t, float*); \
  void kernel_q6_k(const WeightMatrix&, const MatmulActs&, int64_t, int64_t, int64_t, int64_t, float*); \
  size_t packed_strip_bytes(DType t, int64_t cols);                                                    \
  StripPacker strip_packer(DType t);                                                                    \
  void quantize_act_q8_0(const float* x, int64_t cols, const ActQ8Out& out);                            \
  void quantize_act_q8_k(const float* x, int64_t cols, ActBlockQ8K* out);

#if defined(KVLM_KERNEL_ISA) && KVLM_AVX2
namespace KVLM_KERNEL_ISA {
KVLM_DECLARE_SIMD_KERNELS

// Whether a tile of C tokens prefetches its strips in software. The Xeons
// these kernels were tuned on stop their hardware prefetchers at every 4 KiB
// page end. On a Zen 5 the hardware prefetchers follow a paired strip alone
// while a token streams through it (decode): software prefetches 16 blocks
// ahead cost 10% of Q4_0 decode there (and Q4_K decode read 10.0 GB/s a core
// with them against 12.3 without). With several tokens a tile computes
// longer per byte, and prefetching gave Q8_0 prefill back the 3-6% it lost
// without (2026-12-01). Addresses only: no bit depends on it.
// A namespace-scope constant, set before main: a function-local static here
// cost 10% of Q4_0 prefill (its guard is checked on every call, and the
// possible call to initialise it made the kernels spill their accumulators).
inline const bool kStripsCpuIsAmd = cpu_is_amd();
template <int C>
inline bool prefetch_strips() {
  return C > 1 || !kStripsCpuIsAmd;
}

// Where the AVX-512 pair kernels run a tile of several tokens (prefill,
// batched decode) over weights straight from DRAM (a pair's first tile:
// for_each_strip_pair's cold), they prefetch into L2 this
// far ahead of the bytes they read, the packed pairs being contiguous: such
// a tile computes long enough per block that the loads the core keeps in
// flight (a block or two ahead, out of order) read only ~6 GB/s a core, and
// computing and reading took turns. The next pairs of a row chunk lie
// ahead in memory too, so the distance crosses pairs; past a chunk's end it
// fetches rows another thread may take (prefetches never fault). Zen 5, 8
// tokens of TinyLlama's FFN shapes (bench_matmul, cold weights): 300-337 ->
// 460-528 GFLOP/s; the batch-8 decode step 57-71 -> 40-55 ms. On every tile
// it cost Q6_K prefill 7-10% (53 prefetches a block of cached data). Addresses
// only: no bit depends on it.
constexpr int64_t kFarPrefetchBytes = 16 * 1024;
template <int C>
inline bool prefetch_far_tile(bool cold) {
  return C > 1 && cold;
}
// Decode (one token) on AMD, where prefetch_strips leaves the stream to the
// hardware: the kernels that compute most per byte prefetch far ahead too,
// as the loads a core keeps in flight cover too little of the stream. A
// full-width Zen 5 (2026-12-02), TinyLlama, 2 threads, three or four
// alternated runs, tokens/s: the K-quant pairs (AVX-512) Q6_K 29.3-30.0 ->
// 48.6-52.2 (61.5% -> 100% of the limit in a fast-memory minute), Q4_K
// 64.6-66.7 -> 76.4-77.9; the 8-row tiles (KVLM_CPU_PATH=avx2 | avxvnni)
// Q6_K 18.8-19.5 -> 28.7-30.2 | 20.1-23.0 -> 27.3-28.4, Q4_K +10-13%, Q4_0
// 37.6-48.8 -> 46.7-57.8 | 49.0-50.8 -> 62.7-65.7, Q8_0 24.3-32.1 ->
// 30.2-34.2 | unchanged. The AVX-512 Q8_0 and Q4_0 pairs keep the hardware's
// alone: there it cost Q8_0 9% (42.0-42.2 against 36.6-38.6) and left Q4_0
// within noise.
template <int C>
inline bool prefetch_far_decode() {
  return C == 1 && kStripsCpuIsAmd;
}
inline void prefetch_far(const void* at, int64_t bytes) {
  const char* p = static_cast<const char*>(at) + kFarPrefetchBytes;
  for (int64_t l = 0; l < bytes; l += 64) _mm_prefetch(p + l, _MM_HINT_T1);
}

// The packed layouts (one pair per dtype, in its kernel file).
size_t strip_bytes_q8_0(int64_t cols);
size_t strip_bytes_q4_0(int64_t cols);
size_t strip_bytes_q4_k(int64_t cols);
size_t strip_bytes_q6_k(int64_t cols);
size_t strip_bytes_f32(int64_t cols);
size_t strip_bytes_half(int64_t cols);  // F16, BF16
void pack_strip_q8_0(const uint8_t* const* rows, int64_t cols, uint8_t* out, int slot);
void pack_strip_q4_0(const uint8_t* const* rows, int64_t cols, uint8_t* out, int slot);
void pack_strip_q4_k(const uint8_t* const* rows, int64_t cols, uint8_t* out, int slot);
void pack_strip_q6_k(const uint8_t* const* rows, int64_t cols, uint8_t* out, int slot);
void pack_strip_f32(const uint8_t* const* rows, int64_t cols, uint8_t* out, int slot);
void pack_strip_half(const uint8_t* const* rows, int64_t cols, uint8_t* out, int slot);

// Strip s of w (rows 8s .. 8s + 7) as the kernels read it: its packed strip,
// or, for a matrix without one (packed under the scalar path, or never), this
// path's packing of it made now in the calling thread's scratch (a paired
// layout: slot 0 of a pair). Rows past the matrix's end repeat its last row.
inline StripAt strip_of(const WeightMatrix& w, int64_t s) {
  if (const PackedWeights* p = packed_weights(w)) return p->strip(s);
  const size_t wrow_bytes = row_bytes(w.dtype, w.cols);
  const auto* base = static_cast<const uint8_t*>(w.data);
  const uint8_t* rows[kStripRows];
  for (int k = 0; k < kStripRows; ++k)
    rows[k] = base + static_cast<size_t>(std::min(s * kStripRows + k, w.rows - 1)) * wrow_bytes;
  const size_t bytes = packed_strip_bytes(w.dtype, w.cols) * (paired_strips(w.dtype) ? 2 : 1);
  uint8_t* scratch = strip_scratch(bytes);
  strip_packer(w.dtype)(rows, w.cols, scratch, 0);
  return StripAt{scratch, 0};
}

// Drives a strip kernel: for each strip of 8 rows in [row_begin, row_end)
// (packed already, or packed now into scratch), for each tile of at most
// kMaxTile tokens, tile.template operator()<C>(strip, first_token, out) fills
// out[c] (lane k: row 8s + k) for the C tokens; rows past row_end are dropped.
template <int kMaxTile, typename TileFn>
void for_each_strip(const WeightMatrix& w, int64_t row_begin, int64_t row_end, int64_t tok_begin,
                    int64_t tok_end, float* y, TileFn&& tile) {
  KVLM_ASSERT(row_begin % kStripRows == 0, "matmul: row range not aligned to a strip");
  for (int64_t r0 = row_begin; r0 < row_end; r0 += kStripRows) {
    const int num_rows = static_cast<int>(std::min<int64_t>(kStripRows, row_end - r0));
    const StripAt strip = strip_of(w, r0 / kStripRows);
    for (int64_t t = tok_begin; t < tok_end; t += kMaxTile) {
      const int n = static_cast<int>(std::min<int64_t>(kMaxTile, tok_end - t));
      __m256 out[kMaxTile];
      dispatch_tile<kMaxTile>(n, [&]<int C>() { tile.template operator()<C>(strip, t, out); });
      for (int c = 0; c < n; ++c) {
        float* dst = y + (t + c) * w.rows + r0;
        if (num_rows == kStripRows) {
          _mm256_storeu_ps(dst, out[c]);
        } else {
          alignas(32) float lanes[kStripRows];
          _mm256_store_ps(lanes, out[c]);
          // A plain loop, not std::copy: no library template gets
          // instantiated with this path's ISA flags.
          for (int k = 0; k < num_rows; ++k) dst[k] = lanes[k];
        }
      }
    }
  }
}

// A range kernel (for_each_strip_chunked's contract below) as a whole-strip
// tile (for_each_strip's): blocks [0, num_blocks), the chain from zero.
template <typename RangeFn>
auto whole_strip(RangeFn& range, int64_t num_blocks) {
  return [&range, num_blocks]<int C>(StripAt strip, int64_t t, __m256* acc) {
    range.template operator()<C>(strip, t, 0, num_blocks, acc);
  };
}

// for_each_strip for 8-row kernels on a paired layout (paired_strips()):
// range.template operator()<C>(strip, t, b0, b1, acc) adds the strip's
// blocks [b0, b1) of its num_blocks to acc. Both strips of a pair advance
// together, kChunkBlocks blocks (about 8 KiB) at a time, so the pair is read once, front
// to back. Strip by strip, each pass read every other piece of the pair:
// Q4_K decode on the AVX2 path of a Zen 5 fell from 29 to 21.6 tokens/s, and
// Q4_0's ran at half the AVX-512 speed. The float chains run over the blocks
// in order either way.
template <int kMaxTile, int64_t kChunkBlocks, typename RangeFn>
void for_each_strip_chunked(const WeightMatrix& w, int64_t r0, int64_t r1, int64_t t0, int64_t t1, float* y,
                            int64_t num_blocks, RangeFn&& range) {
  int64_t r = r0;
  // One token tile (decode): several tiles compute long enough per byte that
  // strip by strip is as fast, and a strip stays in cache across them.
  const PackedWeights* packed = packed_weights(w);
  if (packed && (r0 / kStripRows) % 2 == 0 && t1 - t0 <= kMaxTile) {
    for (; r + 2 * kStripRows <= r1; r += 2 * kStripRows) {
      const StripAt pair[2] = {packed->strip(r / kStripRows), packed->strip(r / kStripRows + 1)};
      for (int64_t t = t0; t < t1; t += kMaxTile) {
        const int n = static_cast<int>(std::min<int64_t>(kMaxTile, t1 - t));
        __m256 acc[2][kMaxTile];
        dispatch_tile<kMaxTile>(n, [&]<int C>() {
          for (int c = 0; c < C; ++c) acc[0][c] = acc[1][c] = _mm256_setzero_ps();
          for (int64_t b = 0; b < num_blocks; b += kChunkBlocks) {
            const int64_t e = std::min(num_blocks, b + kChunkBlocks);
            range.template operator()<C>(pair[0], t, b, e, acc[0]);
            range.template operator()<C>(pair[1], t, b, e, acc[1]);
          }
        });
        for (int c = 0; c < n; ++c) {
          _mm256_storeu_ps(y + (t + c) * w.rows + r, acc[0][c]);
          _mm256_storeu_ps(y + (t + c) * w.rows + r + kStripRows, acc[1][c]);
        }
      }
    }
  }
  if (r < r1) {
    for_each_strip<kMaxTile>(w, r, r1, t0, t1, y, whole_strip(range, num_blocks));
  }
}

#if defined(__AVX512F__)
// The same 32 bytes of two strips (a low, b high), their 8 fp16 scales
// each as 16 floats, and 4 bytes in every 32-bit lane of a zmm register.
inline __m512i join_strips(const uint8_t* a, const uint8_t* b) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_load_si256(reinterpret_cast<const __m256i*>(a))),
                            _mm256_load_si256(reinterpret_cast<const __m256i*>(b)), 1);
}
inline __m512 join_scales(const uint16_t* a, const uint16_t* b) {
  const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a));
  const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));
  return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1));
}
inline __m512i broadcast4_512(const void* p) {
  int32_t v;
  __builtin_memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// for_each_strip for kernels that can take two strips at once in zmm
// registers (rows 8s .. 8s+15: lanes 0-7 from strip s, 8-15 from strip s+1),
// so each activation broadcast and each per-block scale step serves 16 rows.
// Packed matrices only; the rows left over (fewer than 16, or an unpacked
// matrix) go to the 8-row tile. Lane for lane the arithmetic is the 8-row
// tile's, so the bits do not depend on which of the two computed a row.
// pair.template operator()<C>(first, second, t, out, next, cold): next is
// the next pair's second strip on the pair's last token tile (else nullptr),
// for the kernel to prefetch while it ends this pair; the running prefetches
// reach into the next pair's first strip only. Earlier tiles leave it alone:
// the pair must stay in L1 for them. cold: the pair's first tile of the call,
// which reads the weights from memory (prefetch_far); later tiles find them
// in cache.
template <int kMaxTile, typename PairFn, typename TileFn>
void for_each_strip_pair(const WeightMatrix& w, int64_t row_begin, int64_t row_end, int64_t tok_begin,
                         int64_t tok_end, float* y, PairFn&& pair, TileFn&& tile) {
  KVLM_ASSERT(row_begin % kStripRows == 0, "matmul: row range not aligned to a strip");
  int64_t r0 = row_begin;
  if (const PackedWeights* packed = packed_weights(w)) {
    for (; r0 + 2 * kStripRows <= row_end; r0 += 2 * kStripRows) {
      const StripAt first = packed->strip(r0 / kStripRows);
      const StripAt second = packed->strip(r0 / kStripRows + 1);
      const StripAt next_second = r0 + 4 * kStripRows <= row_end ? packed->strip(r0 / kStripRows + 3) : StripAt{};
      for (int64_t t = tok_begin; t < tok_end; t += kMaxTile) {
        const int n = static_cast<int>(std::min<int64_t>(kMaxTile, tok_end - t));
        const StripAt next = t + kMaxTile >= tok_end ? next_second : StripAt{};
        __m512 out[kMaxTile];
        const bool cold = t == tok_begin;
        dispatch_tile<kMaxTile>(n, [&]<int C>() { pair.template operator()<C>(first, second, t, out, next, cold); });
        for (int c = 0; c < n; ++c) _mm512_storeu_ps(y + (t + c) * w.rows + r0, out[c]);
      }
    }
  }
  if (r0 < row_end) for_each_strip<kMaxTile>(w, r0, row_end, tok_begin, tok_end, y, tile);
}
#endif  // __AVX512F__
}  // namespace KVLM_KERNEL_ISA
#endif  // KVLM_KERNEL_ISA

}  // namespace cpu
}  // namespace kvlm
