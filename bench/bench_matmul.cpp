// matmul throughput per weight dtype at 4096 x 4096, T = 1, 4, 16, against
// the machine's memory bandwidth.
//
// BM_Matmul weights are "cold": each iteration uses the next of enough copies
// of the matrix to overflow the last-level cache, as the layers of a real model
// do, so T = 1 measures DRAM streaming, not L3. BM_MatmulHot reuses one copy.
// Counters:
//   weight_GB/s  weight bytes read per second (compare with BM_MemoryRead)
//   GFLOP/s      2 * rows * cols * T per second
// Run: ./build-backend/bench/bench_matmul [--benchmark_filter=...]
//      OMP_NUM_THREADS=1 KVLM_BENCH_CPU_TIME=1 ./build-backend/bench/bench_matmul  (per core)
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/quant.h"
#include "backend/thread_pool.h"
#include "backend/threads.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace kvlm {
namespace {

constexpr int64_t kRows = 4096;
constexpr int64_t kCols = 4096;
constexpr size_t kColdBytes = size_t{384} << 20;  // far beyond any L3 here

std::vector<float> random_floats(size_t n, uint32_t seed, float stddev) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Copies of one quantized matrix, back to back, totalling >= kColdBytes.
struct ColdWeights {
  size_t matrix_bytes = 0;
  int num_copies = 0;
  std::unique_ptr<uint8_t[]> data;

  explicit ColdWeights(DType t) {
    const size_t rb = row_bytes(t, kCols);
    matrix_bytes = rb * kRows;
    num_copies = static_cast<int>((kColdBytes + matrix_bytes - 1) / matrix_bytes);
    data = std::make_unique<uint8_t[]>(matrix_bytes * num_copies);
    const auto w = random_floats(static_cast<size_t>(kRows * kCols), 1, 0.02f);
    parallel_for(kRows, [&](int64_t r, int) { quantize_row(t, w.data() + r * kCols, data.get() + r * rb, kCols); });
    for (int c = 1; c < num_copies; ++c) std::memcpy(data.get() + c * matrix_bytes, data.get(), matrix_bytes);
  }
};

// hot = true: always the same copy, so the weights of the quantized types
// stay in L3 and the kernel's own speed shows.
void run_matmul(benchmark::State& state, DType t, bool hot) {
  const int64_t num_tokens = state.range(0);
  static std::unique_ptr<ColdWeights> weights;  // one dtype at a time
  static DType weights_type = DType::kQ8_K;
  if (!weights || weights_type != t) {
    weights.reset();
    weights = std::make_unique<ColdWeights>(t);
    weights_type = t;
  }
  const auto x = random_floats(static_cast<size_t>(num_tokens * kCols), 2, 1.f);
  std::vector<float> y(static_cast<size_t>(num_tokens * kRows));
  int copy = 0;
  for (auto _ : state) {
    const WeightMatrix w{weights->data.get() + copy * weights->matrix_bytes, t, kRows, kCols};
    matmul(w, x.data(), num_tokens, y.data());
    benchmark::DoNotOptimize(y.data());
    if (!hot) copy = (copy + 1) % weights->num_copies;
  }
  const double iters = static_cast<double>(state.iterations());
  state.counters["weight_GB/s"] =
      benchmark::Counter(iters * static_cast<double>(weights->matrix_bytes) * 1e-9, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] = benchmark::Counter(iters * 2.0 * kRows * kCols * num_tokens * 1e-9,
                                                 benchmark::Counter::kIsRate);
  state.counters["threads"] = num_threads();
}

void BM_Matmul(benchmark::State& state, DType t) { run_matmul(state, t, false); }
void BM_MatmulHot(benchmark::State& state, DType t) { run_matmul(state, t, true); }

// Memory bandwidth for comparison: every thread sums its share of a 512 MiB array.
void BM_MemoryRead(benchmark::State& state) {
  const size_t n = (size_t{512} << 20) / sizeof(float);
  static std::unique_ptr<float[]> buf;
  if (!buf) {
    buf = std::make_unique<float[]>(n);
    for (size_t i = 0; i < n; ++i) buf[i] = static_cast<float>(i & 7);
  }
  // One task per thread, each summing a contiguous share.
  const int64_t num_blocks = static_cast<int64_t>(n / 64);
  const int64_t num_tasks = num_threads();
  for (auto _ : state) {
    std::vector<float> partial(static_cast<size_t>(num_tasks), 0.f);
    parallel_for(num_tasks, [&](int64_t task, int) {
      float total = 0.f;
      for (int64_t blk = task * num_blocks / num_tasks; blk < (task + 1) * num_blocks / num_tasks; ++blk) {
        const float* p = buf.get() + blk * 64;
#if defined(__AVX2__)
        __m256 a = _mm256_loadu_ps(p);
        for (int k = 8; k < 64; k += 8) a = _mm256_add_ps(a, _mm256_loadu_ps(p + k));
        alignas(32) float lanes[8];
        _mm256_store_ps(lanes, a);
        total += lanes[0] + lanes[7];
#else
        float s = 0.f;
        for (int k = 0; k < 64; ++k) s += p[k];
        total += s;
#endif
      }
      partial[task] = total;
    });
    benchmark::DoNotOptimize(partial.data());
  }
  state.counters["read_GB/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * static_cast<double>(n * sizeof(float)) * 1e-9,
      benchmark::Counter::kIsRate);
}

void BM_Memcpy(benchmark::State& state) {
  const size_t n = size_t{256} << 20;
  auto src = std::make_unique<uint8_t[]>(n);
  auto dst = std::make_unique<uint8_t[]>(n);
  std::memset(src.get(), 1, n);
  std::memset(dst.get(), 2, n);
  for (auto _ : state) {
    std::memcpy(dst.get(), src.get(), n);
    benchmark::DoNotOptimize(dst.get());
  }
  // Bytes moved: read n + write n.
  state.counters["copy_GB/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * 2.0 * static_cast<double>(n) * 1e-9, benchmark::Counter::kIsRate);
}

// Wall-clock time by default. KVLM_BENCH_CPU_TIME=1 rates by the main
// thread's CPU time instead: with OMP_NUM_THREADS=1 that is the per-core
// speed even on a machine shared with other work.
void register_benchmarks() {
  const char* env = std::getenv("KVLM_BENCH_CPU_TIME");
  const bool real_time = env == nullptr || std::string(env) != "1";
  auto timing = [&](benchmark::internal::Benchmark* b) {
    if (real_time) b->UseRealTime();
    return b;
  };
  timing(benchmark::RegisterBenchmark("BM_MemoryRead", BM_MemoryRead))->Unit(benchmark::kMillisecond);
  timing(benchmark::RegisterBenchmark("BM_Memcpy", BM_Memcpy))->Unit(benchmark::kMillisecond);
  const DType all[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ6_K};
  for (DType t : all) {
    const std::string name = "BM_Matmul/" + std::string(dtype_name(t));
    timing(benchmark::RegisterBenchmark(name.c_str(), BM_Matmul, t))
        ->Arg(1)->Arg(4)->Arg(16)->Unit(benchmark::kMicrosecond);
  }
  // Hot variants (weights cache-resident where they fit) for T = 1 and 16.
  for (DType t : all) {
    if (t == DType::kF32 || t == DType::kBF16) continue;
    const std::string name = "BM_MatmulHot/" + std::string(dtype_name(t));
    timing(benchmark::RegisterBenchmark(name.c_str(), BM_MatmulHot, t))->Arg(1)->Arg(16)->Unit(benchmark::kMicrosecond);
  }
}

}  // namespace
}  // namespace kvlm

int main(int argc, char** argv) {
  kvlm::register_benchmarks();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
