// Decode attention of one sequence at a given context, on TinyLlama's shape
// (32 query heads, 4 KV heads, head size 64, blocks of 16 slots): one layer's
// paged_attention call for one query token, the work a decode step does per
// layer on top of the weights. The KV of one layer at 4,096 tokens is 4 MiB
// (F16), so BM_DecodeAttention/.../4096 reads it from L3 or DRAM, as a model
// whose 22 layers' KV (88 MiB) far exceeds the caches does.
// Counters:
//   kv_GB/s  K and V bytes read per second
// Run: ./build/bench/bench_attention [--benchmark_filter=...]
//      OMP_NUM_THREADS=1 ./build/bench/bench_attention  (one core)
#include <benchmark/benchmark.h>

#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/threads.h"

namespace kvlm {
namespace {

void BM_DecodeAttention(benchmark::State& state, DType dtype) {
  set_num_threads(0);
  const int32_t ctx = static_cast<int32_t>(state.range(0));
  const KvLayout layout{dtype, 16, 4, 64};
  const int32_t num_heads = 32, num_blocks = (ctx + 15) / 16;
  std::vector<uint8_t> k(layout.block_bytes() * num_blocks), v(k.size());
  const KvLayer layer{k.data(), v.data()};
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> kk(static_cast<size_t>(ctx) * 4 * 64), vv(kk.size());
  for (auto& x : kk) x = u(rng);
  for (auto& x : vv) x = u(rng);
  std::vector<int64_t> slots(ctx);
  std::iota(slots.begin(), slots.end(), 0);
  kv_write(layout, layer, kk.data(), vv.data(), slots.data(), ctx);
  std::vector<int32_t> table(num_blocks);
  std::iota(table.begin(), table.end(), 0);
  std::vector<float> q(num_heads * 64), out(q.size());
  for (auto& x : q) x = u(rng);
  const AttentionSeq seq{0, 1, ctx, table};
  const AttentionParams params{num_heads, 0.125f};
  for (auto _ : state) {
    paged_attention(layout, layer, q.data(), {&seq, 1}, params, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["kv_GB/s"] = benchmark::Counter(2.0 * ctx * layout.row_bytes() * 4 * state.iterations() / 1e9,
                                                 benchmark::Counter::kIsRate);
}

BENCHMARK_CAPTURE(BM_DecodeAttention, f16, DType::kF16)->Arg(256)->Arg(1024)->Arg(4096)->UseRealTime();
BENCHMARK_CAPTURE(BM_DecodeAttention, f32, DType::kF32)->Arg(4096)->UseRealTime();
BENCHMARK_CAPTURE(BM_DecodeAttention, q8_0, DType::kQ8_0)->Arg(4096)->UseRealTime();

}  // namespace
}  // namespace kvlm

BENCHMARK_MAIN();
