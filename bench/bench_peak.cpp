// The machine's arithmetic peak per core, the yardstick for the matmul
// kernels: independent chains of one instruction, enough of them to hide its
// latency, nothing else in the loop. Counters:
//   GMAC/s  multiply-adds per second (an FMA lane is one, a vpdpbusd lane four)
// Run: ./build/bench/bench_peak   (one thread; start two copies at once to see
//      whether the cores keep their clock with both busy)
// Why it matters: the kernels are judged against these figures, not against
// data-sheet numbers. On the 2-core Xeon we measure on (with the earlier
// probe, see KVLM_OPAQUE: its figures are lower bounds): f32 FMA zmm 81 G
// lanes/s against ymm 46 G, vpdpbusd zmm 118 G multiply-adds/s against ymm
// 87 G (one 512-bit VNNI port), which is why the int8 kernels take 16 rows
// per vector. Rate by CPU time, so a machine shared with other work still
// gives the per-core figure.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include "backend/cpu/cpu_path.h"

namespace kvlm {
namespace {

constexpr int kChains = 12;  // > latency x ports of every instruction below

// Each round starts with an empty asm statement that "changes" x, so the
// compiler can neither hoist a product out of the loop nor precompute the
// chains; the asm statement after the loop keeps every chain live. The
// chains stay in registers: an earlier version kept them live with that asm
// statement inside the loop, and GCC then stored and reloaded all 12 every
// round, so each chain also waited on store forwarding. That probe measured
// 85-115 G vpdpbusd multiply-adds/s a core on the Zen 5, below what the Q4_0
// prefill kernel achieved; this one measures 223-230 G there.
#define KVLM_OPAQUE(x) asm volatile("" : "+v"(x))
#define KVLM_KEEP12(a)                                                                                   \
  asm volatile("" : "+v"(a[0]), "+v"(a[1]), "+v"(a[2]), "+v"(a[3]), "+v"(a[4]), "+v"(a[5]), "+v"(a[6]), \
               "+v"(a[7]), "+v"(a[8]), "+v"(a[9]), "+v"(a[10]), "+v"(a[11]))

__attribute__((target("avx2,fma"))) void fma_ymm(int64_t rounds) {
  __m256 a[kChains];
  __m256 x = _mm256_set1_ps(1.0001f), y = _mm256_set1_ps(0.9999f);
  for (int j = 0; j < kChains; ++j) a[j] = _mm256_set1_ps(static_cast<float>(j));
  for (int64_t i = 0; i < rounds; ++i) {
    KVLM_OPAQUE(x);
#pragma GCC unroll 16
    for (int j = 0; j < kChains; ++j) a[j] = _mm256_fmadd_ps(a[j], x, y);
  }
  KVLM_KEEP12(a);
}

__attribute__((target("avx512f"))) void fma_zmm(int64_t rounds) {
  __m512 a[kChains];
  __m512 x = _mm512_set1_ps(1.0001f), y = _mm512_set1_ps(0.9999f);
  for (int j = 0; j < kChains; ++j) a[j] = _mm512_set1_ps(static_cast<float>(j));
  for (int64_t i = 0; i < rounds; ++i) {
    KVLM_OPAQUE(x);
#pragma GCC unroll 16
    for (int j = 0; j < kChains; ++j) a[j] = _mm512_fmadd_ps(a[j], x, y);
  }
  KVLM_KEEP12(a);
}

__attribute__((target("avx512f,avx512vl,avx512vnni"))) void dpbusd_ymm(int64_t rounds) {
  __m256i a[kChains];
  __m256i x = _mm256_set1_epi8(1), y = _mm256_set1_epi8(2);
  for (int j = 0; j < kChains; ++j) a[j] = _mm256_set1_epi32(j);
  for (int64_t i = 0; i < rounds; ++i) {
    KVLM_OPAQUE(x);
#pragma GCC unroll 16
    for (int j = 0; j < kChains; ++j) a[j] = _mm256_dpbusd_epi32(a[j], x, y);
  }
  KVLM_KEEP12(a);
}

__attribute__((target("avx512f,avx512vnni"))) void dpbusd_zmm(int64_t rounds) {
  __m512i a[kChains];
  __m512i x = _mm512_set1_epi8(1), y = _mm512_set1_epi8(2);
  for (int j = 0; j < kChains; ++j) a[j] = _mm512_set1_epi32(j);
  for (int64_t i = 0; i < rounds; ++i) {
    KVLM_OPAQUE(x);
#pragma GCC unroll 16
    for (int j = 0; j < kChains; ++j) a[j] = _mm512_dpbusd_epi32(a[j], x, y);
  }
  KVLM_KEEP12(a);
}

// AVX2 without VNNI: vpmaddubsw + vpmaddwd + vpaddd, 32 byte products per
// triple. Each chain's unsigned bytes are its own accumulator: with a fixed
// operand pair the product is loop-invariant, and the compiler hoists it (an
// earlier version measured vpaddd alone, 115 G "multiply-adds" a core).
__attribute__((target("avx2"))) void maddubs_ymm(int64_t rounds) {
  __m256i a[kChains];
  const __m256i y = _mm256_set1_epi8(2), ones = _mm256_set1_epi16(1);
  for (int j = 0; j < kChains; ++j) a[j] = _mm256_set1_epi32(j);
  for (int64_t i = 0; i < rounds; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < kChains; ++j)
      a[j] = _mm256_add_epi32(a[j], _mm256_madd_epi16(_mm256_maddubs_epi16(a[j], y), ones));
  }
  KVLM_KEEP12(a);
}

// The int8 matmul recipe (matmul_impl.h) on 16 rows, 8 tokens, one 32-column
// block a round, from registers: 8 vpdpbusd a token, then its float step
// (the sum from the 1.5 * 2^23 bias less its offset, times dw * dx, added).
// GMAC/s counts the vpdpbusd multiply-adds only, so it reads against
// int8_dpbusd_zmm: the gap is what the recipe's steps cost this core. Zen 5
// with two zmm VPDPBUSD a cycle (2026-12-02): 418-444 G alone, 329-351 G here
// (79%); a probe of the Q4_0 tile of 8 tokens from L1, with its broadcast
// loads and nibble unpacking, ran 355-375 G without the steps and 275-285 G
// with them (the vsubps alone cost 10%), and kernel_q4_0 itself 264 G.
#define KVLM_KEEP8(a)                                                                                    \
  asm volatile("" : "+v"(a[0]), "+v"(a[1]), "+v"(a[2]), "+v"(a[3]), "+v"(a[4]), "+v"(a[5]), "+v"(a[6]), \
               "+v"(a[7]))
__attribute__((target("avx512f,avx512vnni"))) void q8_steps_zmm(int64_t rounds) {
  constexpr int kTokens = 8;
  __m512i x[kTokens];
  __m512 acc[kTokens];
  // Bytes 0x40 + c: read as floats (the scales and offsets) they are ~3, not denormal.
  for (int c = 0; c < kTokens; ++c) x[c] = _mm512_set1_epi8(static_cast<char>(0x40 + c));
  for (int c = 0; c < kTokens; ++c) acc[c] = _mm512_setzero_ps();
  __m512i w = _mm512_set1_epi8(3);
  const __m512i start = _mm512_set1_epi32(0x4B400000);
  __m512 dw = _mm512_set1_ps(0.01f);
  for (int64_t i = 0; i < rounds; ++i) {
    KVLM_OPAQUE(w);
    KVLM_OPAQUE(dw);  // each block has its own weight scales
    __m512i sum[kTokens];
#pragma GCC unroll 8
    for (int c = 0; c < kTokens; ++c) sum[c] = start;
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g)
#pragma GCC unroll 8
      for (int c = 0; c < kTokens; ++c) sum[c] = _mm512_dpbusd_epi32(sum[c], w, x[c]);
#pragma GCC unroll 8
    for (int c = 0; c < kTokens; ++c) {
      const __m512 dx = _mm512_castsi512_ps(x[c]);
      const __m512 exact = _mm512_sub_ps(_mm512_castsi512_ps(sum[c]), dx);
      acc[c] = _mm512_fmadd_ps(exact, _mm512_mul_ps(dw, dx), acc[c]);
    }
  }
  KVLM_KEEP8(acc);
}

void run(benchmark::State& state, CpuPath needs, void (*fn)(int64_t), double macs_per_round) {
  if (!cpu_path_supported(needs)) {
    state.SkipWithError("this CPU lacks the instruction");
    return;
  }
  constexpr int64_t kRounds = 1 << 20;
  for (auto _ : state) fn(kRounds);
  state.counters["GMAC/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * kRounds * macs_per_round / 1e9,
      benchmark::Counter::kIsRate);
}

// The last argument: multiply-adds a round (chains x lanes x multiply-adds a lane).
BENCHMARK_CAPTURE(run, fma_ymm, CpuPath::kAvx2, fma_ymm, kChains * 8.0);
BENCHMARK_CAPTURE(run, fma_zmm, CpuPath::kAvx512, fma_zmm, kChains * 16.0);
BENCHMARK_CAPTURE(run, int8_maddubs_ymm, CpuPath::kAvx2, maddubs_ymm, kChains * 32.0);
BENCHMARK_CAPTURE(run, int8_dpbusd_ymm, CpuPath::kAvx512, dpbusd_ymm, kChains * 32.0);
BENCHMARK_CAPTURE(run, int8_dpbusd_zmm, CpuPath::kAvx512, dpbusd_zmm, kChains * 64.0);
BENCHMARK_CAPTURE(run, int8_dpbusd_zmm_with_q8_steps, CpuPath::kAvx512, q8_steps_zmm, 8 * 8 * 64.0);

}  // namespace
}  // namespace kvlm

BENCHMARK_MAIN();
