// Decode attention of one sequence at a given context, on TinyLlama's shape
// (32 query heads, 4 KV heads, head size 64, blocks of 16 slots): one layer's
// paged_attention call for one query token, the work a decode step does per
// layer on top of the weights.
//   BM_DecodeAttention   one layer's KV, read again each iteration: at 4,096
//                        tokens (4 MiB F16) it stays in L2/L3 between calls.
//   BM_DecodeAttentionCold  as a model reads it, from DRAM: 80 layers' KV
//                        (320 MiB F16 at 4,096 tokens, more than this
//                        machine's 260 MiB L3; in a model the weights streaming
//                        through evict the KV between its reads), one layer per
//                        iteration in turn, each layer's blocks shuffled in its
//                        pool as the block manager leaves them after other
//                        sequences came and went.
//   BM_DecodeAttentionColdInOrder  the same with each layer's blocks in pool
//                        order (a fresh pool), where the hardware prefetchers
//                        can follow the addresses across blocks.
//   BM_Softmax           the softmax of one GQA group's score rows (8 heads)
//                        at the given context, on one thread: the part of
//                        a layer's attention between scores and values.
//   BM_DecodeAttentionBatch  a decode step of 8 sequences at a short context
//                        (the argument), each its own blocks: batched
//                        serving's attention, where the work per call is
//                        small and the fixed costs show.
//   BM_DecodeAttentionCold4K  Cold on 4 KiB pages. The KV pool asks for 2 MiB
//                        pages (runner/kv_storage.cpp), and so do the other
//                        cases here; this one shows what the TLB misses cost.
// Counters:
//   kv_GB/s  K and V bytes read per second
// Run: ./build/bench/bench_attention [--benchmark_filter=...]
//      OMP_NUM_THREADS=1 ./build/bench/bench_attention  (one core)
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/ops.h"
#include "backend/threads.h"
#include "common/huge_pages.h"

namespace kvlm {
namespace {

constexpr int32_t kNumHeads = 32, kNumKvHeads = 4, kHeadDim = 64, kBlockSize = 16;

// n zeroed bytes on 2 MiB pages where the kernel grants them (huge), or on
// 4 KiB pages.
HugePageBuffer allocate(size_t n, bool huge) {
  return HugePageBuffer(n, "bench_attention", huge ? PageAdvice::kHuge : PageAdvice::kSmall);
}

// num_layers layers of KV for one sequence of ctx tokens, random values.
struct Layers {
  KvLayout layout;
  std::vector<HugePageBuffer> k, v;
  std::vector<std::vector<int32_t>> tables;  // one per layer

  Layers(DType dtype, int32_t ctx, int num_layers, bool shuffle, bool huge)
      : layout{dtype, kBlockSize, kNumKvHeads, kHeadDim} {
    const int32_t num_blocks = (ctx + kBlockSize - 1) / kBlockSize;
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    std::vector<float> kk(static_cast<size_t>(ctx) * kNumKvHeads * kHeadDim), vv(kk.size());
    std::vector<int64_t> slots(ctx);
    for (auto& x : kk) x = u(rng);  // the same values in every layer: a quick setup
    for (auto& x : vv) x = u(rng);
    for (int l = 0; l < num_layers; ++l) {
      k.push_back(allocate(layout.block_bytes() * num_blocks, huge));
      v.push_back(allocate(layout.block_bytes() * num_blocks, huge));
      std::vector<int32_t> table(num_blocks);
      std::iota(table.begin(), table.end(), 0);
      if (shuffle) std::shuffle(table.begin(), table.end(), rng);
      for (int32_t s = 0; s < ctx; ++s) slots[s] = static_cast<int64_t>(table[s / kBlockSize]) * kBlockSize + s % kBlockSize;
      kv_write(layout, layer(l), kk.data(), vv.data(), slots.data(), ctx);
      tables.push_back(std::move(table));
    }
  }
  KvLayer layer(int l) { return KvLayer{k[l].data(), v[l].data()}; }
};

void run(benchmark::State& state, DType dtype, int num_layers, bool shuffle, bool huge = true) {
  set_num_threads(0);
  const int32_t ctx = static_cast<int32_t>(state.range(0));
  Layers layers(dtype, ctx, num_layers, shuffle, huge);
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> q(kNumHeads * kHeadDim), out(q.size());
  for (auto& x : q) x = u(rng);
  const AttentionParams params{kNumHeads, 0.125f};
  int l = 0;
  for (auto _ : state) {
    const AttentionSeq seq{0, 1, ctx, layers.tables[l]};
    paged_attention(layers.layout, layers.layer(l), q.data(), {&seq, 1}, params, out.data());
    benchmark::DoNotOptimize(out.data());
    l = (l + 1) % num_layers;
  }
  state.counters["kv_GB/s"] = benchmark::Counter(
      2.0 * ctx * layers.layout.row_bytes() * kNumKvHeads * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

// A decode step of kBatchSeqs sequences of ctx tokens each (the batch-8 step
// of serving at short contexts): one layer, each sequence its own blocks.
constexpr int32_t kBatchSeqs = 8;
void BM_DecodeAttentionBatch(benchmark::State& state) {
  set_num_threads(0);
  const int32_t ctx = static_cast<int32_t>(state.range(0));
  const int32_t blocks_per_seq = (ctx + kBlockSize - 1) / kBlockSize;
  Layers layers(DType::kF16, blocks_per_seq * kBlockSize * kBatchSeqs, 1, false, true);
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> q(kBatchSeqs * kNumHeads * kHeadDim), out(q.size());
  for (auto& x : q) x = u(rng);
  std::vector<AttentionSeq> seqs;
  for (int32_t s = 0; s < kBatchSeqs; ++s)
    seqs.push_back({s, 1, ctx, std::span<const int32_t>(layers.tables[0]).subspan(s * blocks_per_seq, blocks_per_seq)});
  const AttentionParams params{kNumHeads, 0.125f};
  for (auto _ : state) {
    paged_attention(layers.layout, layers.layer(0), q.data(), seqs, params, out.data());
    benchmark::DoNotOptimize(out.data());
  }
}

void BM_DecodeAttention(benchmark::State& state, DType dtype) { run(state, dtype, 1, false); }
void BM_DecodeAttentionCold(benchmark::State& state, DType dtype) { run(state, dtype, 80, true); }
void BM_DecodeAttentionColdInOrder(benchmark::State& state, DType dtype) { run(state, dtype, 80, false); }
void BM_DecodeAttentionCold4K(benchmark::State& state, DType dtype) { run(state, dtype, 80, true, false); }

void BM_Softmax(benchmark::State& state) {
  const int64_t ctx = state.range(0);
  constexpr int64_t kGroup = kNumHeads / kNumKvHeads;
  std::mt19937 rng(3);
  std::normal_distribution<float> scores(0.f, 3.f);
  std::vector<float> rows(static_cast<size_t>(kGroup * ctx));
  for (auto& x : rows) x = scores(rng);
  // Softmax again over its own output after the first pass: the same work a value.
  for (auto _ : state) {
    for (int64_t g = 0; g < kGroup; ++g) softmax(rows.data() + g * ctx, 1, ctx);  // one row a call, as attention does
    benchmark::DoNotOptimize(rows.data());
  }
  state.counters["values/s"] = benchmark::Counter(static_cast<double>(kGroup * ctx * state.iterations()),
                                                  benchmark::Counter::kIsRate);
}

BENCHMARK(BM_Softmax)->Arg(4096);
BENCHMARK(BM_DecodeAttentionBatch)->Arg(40)->Arg(72)->UseRealTime();
BENCHMARK_CAPTURE(BM_DecodeAttention, f16, DType::kF16)->Arg(256)->Arg(1024)->Arg(4096)->UseRealTime();
BENCHMARK_CAPTURE(BM_DecodeAttention, bf16, DType::kBF16)->Arg(256)->Arg(1024)->Arg(4096)->UseRealTime();
BENCHMARK_CAPTURE(BM_DecodeAttention, f32, DType::kF32)->Arg(4096)->UseRealTime();
BENCHMARK_CAPTURE(BM_DecodeAttention, q8_0, DType::kQ8_0)->Arg(1024)->Arg(4096)->UseRealTime();
BENCHMARK_CAPTURE(BM_DecodeAttention, q4_0, DType::kQ4_0)->Arg(1024)->Arg(4096)->UseRealTime();
BENCHMARK_CAPTURE(BM_DecodeAttentionCold, f16, DType::kF16)->Arg(4096)->UseRealTime();
BENCHMARK_CAPTURE(BM_DecodeAttentionCold, bf16, DType::kBF16)->Arg(4096)->UseRealTime();
BENCHMARK_CAPTURE(BM_DecodeAttentionCold, q8_0, DType::kQ8_0)->Arg(4096)->UseRealTime();
BENCHMARK_CAPTURE(BM_DecodeAttentionCold, q4_0, DType::kQ4_0)->Arg(4096)->UseRealTime();
BENCHMARK_CAPTURE(BM_DecodeAttentionColdInOrder, f16, DType::kF16)->Arg(4096)->UseRealTime();
BENCHMARK_CAPTURE(BM_DecodeAttentionCold4K, f16, DType::kF16)->Arg(4096)->UseRealTime();

}  // namespace
}  // namespace kvlm

BENCHMARK_MAIN();
