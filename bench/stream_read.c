// How fast this machine reads memory as one stream per thread against
// several interleaved streams: the reason kvlm packs Q8_0/Q4_0 strips in
// pairs (src/backend/cpu/matmul_impl.h, PackedWeights). Each pattern reads
// the same 1 GiB once per round (2 MiB pages), best of 4 rounds:
//   S streams per thread, `gap` bytes apart, each advanced `step` bytes at a time.
// On a 2-core Zen 5 (2026-12-01), one thread: 1 stream 31.2 GB/s, 2 streams
// 20.1, 4 streams 19.2, 8 rows 4 KiB apart 21.3; two threads: 36.8, 34.4,
// 32.8, 33.0.
//   gcc -O2 -march=native -fopenmp bench/stream_read.c -o /tmp/stream_read
//   OMP_NUM_THREADS=1 /tmp/stream_read; OMP_NUM_THREADS=2 /tmp/stream_read
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

static const size_t kBytes = (size_t)1 << 30;

// Sums every 64-byte line of the pattern; returns the sum so nothing is dropped.
static float read_pattern(const char* buf, int streams, size_t gap, size_t step) {
  float total = 0;
#pragma omp parallel reduction(+ : total)
  {
    const size_t share = kBytes / omp_get_num_threads(), lo = share * omp_get_thread_num();
    const size_t group = gap * streams;
    // One 32-byte load a line (the line is what travels), into two sums so
    // that the adds' latency never bounds the loop.
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (size_t b = lo; b + group <= lo + share; b += group)
      for (size_t off = 0; off < gap; off += step)
        for (int s = 0; s < streams; ++s)
          for (size_t l = 0; l < step; l += 64)
            acc[(l >> 6) & 1] = _mm256_add_ps(acc[(l >> 6) & 1], _mm256_load_ps((const float*)(buf + b + s * gap + off + l)));
    float lanes[8];
    _mm256_storeu_ps(lanes, _mm256_add_ps(acc[0], acc[1]));
    total += lanes[0];
  }
  return total;
}

int main(void) {
  const size_t huge = (size_t)2 << 20;
  char* raw = mmap(NULL, kBytes + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return 1;
  char* buf = (char*)(((unsigned long)raw + huge - 1) & ~(huge - 1));
  madvise(buf, kBytes, MADV_HUGEPAGE);
  memset(buf, 1, kBytes);
  const struct { int streams; size_t gap, step; const char* name; } cases[] = {
      {1, 4096, 4096, "1 stream"},
      {2, 18432, 128, "2 streams 18 KiB apart, 128 B steps"},
      {4, 9216, 128, "4 streams 9 KiB apart, 128 B steps"},
      {8, 4096, 128, "8 rows 4 KiB apart, 128 B steps"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
    double best = 1e30;
    volatile float sink = 0;
    for (int round = 0; round < 4; ++round) {
      const double t0 = omp_get_wtime();
      sink += read_pattern(buf, cases[i].streams, cases[i].gap, cases[i].step);
      const double dt = omp_get_wtime() - t0;
      if (dt < best) best = dt;
    }
    printf("%-40s %6.1f GB/s\n", cases[i].name, kBytes / best / 1e9);
  }
  return 0;
}
