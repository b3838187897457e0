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

void run(benchmark::State& state, CpuPath needs, void (*fn)(int64_t), double macs_per_instruction) {
  if (!cpu_path_supported(needs)) {
    state.SkipWithError("this CPU lacks the instruction");
    return;
  }
  constexpr int64_t kRounds = 1 << 20;
  for (auto _ : state) fn(kRounds);
  state.counters["GMAC/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * kRounds * kChains * macs_per_instruction / 1e9,
      benchmark::Counter::kIsRate);
}

BENCHMARK_CAPTURE(run, fma_ymm, CpuPath::kAvx2, fma_ymm, 8.0);
BENCHMARK_CAPTURE(run, fma_zmm, CpuPath::kAvx512, fma_zmm, 16.0);
BENCHMARK_CAPTURE(run, int8_maddubs_ymm, CpuPath::kAvx2, maddubs_ymm, 32.0);
BENCHMARK_CAPTURE(run, int8_dpbusd_ymm, CpuPath::kAvx512, dpbusd_ymm, 32.0);
BENCHMARK_CAPTURE(run, int8_dpbusd_zmm, CpuPath::kAvx512, dpbusd_zmm, 64.0);

}  // namespace
}  // namespace kvlm

BENCHMARK_MAIN();
