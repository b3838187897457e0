// matmul throughput per weight dtype, against the machine's memory bandwidth:
// 4096 x 4096 (a 7B model's attention matrices) at T = 1, 4, 16, 64, 256 and
// the small shapes of the synth-tiny test models (768 x 256: FFN up/gate,
// 256 x 768: FFN down) at the same T, and TinyLlama-1.1B's FFN (5632 x 2048
// up/gate, 2048 x 5632 down) at T = 8 (a batch-8 decode step) and 512 (a
// prefill chunk).
//
// BM_Matmul/<type>/4096x4096 weights are "cold": each iteration uses the next
// of enough copies of the matrix to overflow the last-level cache, as the
// layers of a real model do, so T = 1 measures DRAM streaming, not L3. The
// small shapes and BM_MatmulHot reuse one copy (cache-resident).
// Quantized weights are packed as the model loaders pack them
// (pack_for_matmul); BM_MatmulUnpacked shows matmul on the GGUF layout.
// Counters:
//   weight_GB/s  weight bytes read per second (compare with BM_MemoryRead)
//   GFLOP/s      2 * rows * cols * T per second
// Run: ./build/bench/bench_matmul [--benchmark_filter=...]
//      OMP_NUM_THREADS=1 KVLM_BENCH_CPU_TIME=1 ./build/bench/bench_matmul  (per core)
//      KVLM_CPU_PATH=avx2 ./build/bench/bench_matmul  (one kernel path: scalar, avx2, avxvnni, avx512)
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_path.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/matmul_impl.h"
#include "backend/quant.h"
#include "backend/thread_pool.h"
#include "backend/threads.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace kvlm {
namespace {

constexpr size_t kColdBytes = size_t{384} << 20;  // far beyond any L3 here

struct Shape {
  int64_t rows, cols;
  bool cold;  // cycle through copies that overflow the caches
};

std::vector<float> random_floats(size_t n, uint32_t seed, float stddev) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Copies of one quantized matrix, back to back, totalling >= kColdBytes (one
// copy when not cold), each with its packed form when `packed`.
struct Weights {
  DType type;
  Shape shape;
  bool packed;
  size_t matrix_bytes = 0;
  std::unique_ptr<uint8_t[]> data;
  std::vector<WeightMatrix> copies;

  Weights(DType t, Shape s, bool pack) : type(t), shape(s), packed(pack) {
    const size_t rb = row_bytes(t, s.cols);
    matrix_bytes = rb * s.rows;
    const int num_copies = s.cold ? static_cast<int>((kColdBytes + matrix_bytes - 1) / matrix_bytes) : 1;
    data = std::make_unique<uint8_t[]>(matrix_bytes * num_copies);
    const auto w = random_floats(static_cast<size_t>(s.rows * s.cols), 1, 0.02f);
    parallel_for(s.rows, [&](int64_t r, int) { quantize_row(t, w.data() + r * s.cols, data.get() + r * rb, s.cols); });
    for (int c = 1; c < num_copies; ++c) std::memcpy(data.get() + c * matrix_bytes, data.get(), matrix_bytes);
    for (int c = 0; c < num_copies; ++c) {
      const WeightMatrix m{data.get() + c * matrix_bytes, t, s.rows, s.cols, nullptr};
      copies.push_back(pack ? pack_for_matmul(m) : m);
    }
  }
};

// hot = true: always the same copy, so the weights of the quantized types
// stay in L3 and the kernel's own speed shows.
void run_matmul(benchmark::State& state, DType t, Shape shape, bool hot, bool packed) {
  const int64_t num_tokens = state.range(0);
  static std::unique_ptr<Weights> weights;  // one matrix at a time
  if (!weights || weights->type != t || weights->shape.rows != shape.rows || weights->shape.cols != shape.cols ||
      weights->shape.cold != shape.cold || weights->packed != packed) {
    weights.reset();
    weights = std::make_unique<Weights>(t, shape, packed);
  }
  const auto x = random_floats(static_cast<size_t>(num_tokens * shape.cols), 2, 1.f);
  std::vector<float> y(static_cast<size_t>(num_tokens * shape.rows));
  size_t copy = 0;
  for (auto _ : state) {
    matmul(weights->copies[copy], x.data(), num_tokens, y.data());
    benchmark::DoNotOptimize(y.data());
    if (!hot) copy = (copy + 1) % weights->copies.size();
  }
  const double iters = static_cast<double>(state.iterations());
  state.counters["weight_GB/s"] =
      benchmark::Counter(iters * static_cast<double>(weights->matrix_bytes) * 1e-9, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] = benchmark::Counter(iters * 2.0 * shape.rows * shape.cols * num_tokens * 1e-9,
                                                 benchmark::Counter::kIsRate);
  state.counters["threads"] = num_threads();
}

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

// The activation quantizer of Q8_0/Q4_0 calls on one thread: 8 tokens of
// TinyLlama's FFN width (a batch-8 step's down projection), with the
// block-major copy where the path's kernels read it.
void BM_QuantizeActQ8_0(benchmark::State& state) {
  const int64_t cols = 5632, num_tokens = 8;
  const std::vector<float> x = random_floats(static_cast<size_t>(cols * num_tokens), 5, 1.f);
  std::vector<int8_t> qs(x.size());
  std::vector<float> d(x.size() / 32);
  std::vector<int32_t> sums(d.size());
  std::vector<cpu::ActBlockQ8Tile> tiles(d.size());
  const cpu::CpuKernels& kernels = cpu::kernels_for(active_cpu_path());
  for (auto _ : state) {
    for (int64_t t = 0; t < num_tokens; ++t) {
      kernels.act_q8_0(x.data() + t * cols, cols,
                       cpu::act_q8_out_for_token(qs.data(), d.data(), sums.data(),
                                                 kernels.act_q8_tiles ? tiles.data() : nullptr, cols, num_tokens, t));
    }
    benchmark::DoNotOptimize(qs.data());
    benchmark::DoNotOptimize(tiles.data());
  }
  state.counters["values/s"] = benchmark::Counter(static_cast<double>(state.iterations()) *
                                                      static_cast<double>(x.size()), benchmark::Counter::kIsRate);
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
  timing(benchmark::RegisterBenchmark("BM_QuantizeActQ8_0", BM_QuantizeActQ8_0))->Unit(benchmark::kMicrosecond);
  const DType all[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ6_K};
  const Shape shapes[] = {{4096, 4096, true}, {768, 256, false}, {256, 768, false}};
  for (const Shape& shape : shapes) {
    for (DType t : all) {
      const std::string name = "BM_Matmul/" + std::string(dtype_name(t)) + "/" + std::to_string(shape.rows) + "x" +
                               std::to_string(shape.cols);
      timing(benchmark::RegisterBenchmark(name.c_str(), [t, shape](benchmark::State& st) {
        run_matmul(st, t, shape, !shape.cold, true);
      }))->Arg(1)->Arg(4)->Arg(16)->Arg(64)->Arg(256)->Unit(benchmark::kMicrosecond);
    }
  }
  for (const Shape& shape : {Shape{5632, 2048, true}, Shape{2048, 5632, true}}) {
    for (DType t : all) {
      const std::string name = "BM_Matmul/" + std::string(dtype_name(t)) + "/" + std::to_string(shape.rows) + "x" +
                               std::to_string(shape.cols);
      timing(benchmark::RegisterBenchmark(name.c_str(), [t, shape](benchmark::State& st) {
        run_matmul(st, t, shape, false, true);
      }))->Arg(8)->Arg(512)->Unit(benchmark::kMicrosecond);
    }
  }
  // 4096 x 4096 with the weights cache-resident (L3), and quantized weights
  // left in the GGUF layout (packed 8 rows at a time inside matmul).
  for (DType t : all) {
    const Shape shape{4096, 4096, false};
    const std::string type(dtype_name(t));
    timing(benchmark::RegisterBenchmark(("BM_MatmulHot/" + type).c_str(), [t, shape](benchmark::State& st) {
      run_matmul(st, t, shape, true, true);
    }))->Arg(1)->Arg(8)->Arg(16)->Unit(benchmark::kMicrosecond);
    if (!is_quantized(t)) continue;
    timing(benchmark::RegisterBenchmark(("BM_MatmulUnpacked/" + type).c_str(), [t](benchmark::State& st) {
      run_matmul(st, t, Shape{4096, 4096, true}, false, false);
    }))->Arg(1)->Arg(16)->Unit(benchmark::kMicrosecond);
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
