// The KV byte work of evictions (kv_copy_block, kv_move_slot, kv_rotate_key)
// for every KV dtype: moves and copies are exact, a re-rotated key equals the
// key rotated at its new position, and the attention statistics the kernel
// writes are the softmax weights of the reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/ops.h"

namespace kvlm {
namespace {

struct Pool {
  KvLayout layout;
  std::vector<uint8_t> k, v;
  KvLayer layer;
  Pool(DType dtype, int32_t num_blocks) {
    layout = KvLayout{dtype, 16, 2, 64};
    k.assign(layout.block_bytes() * num_blocks, 0);
    v.assign(layout.block_bytes() * num_blocks, 0);
    layer = KvLayer{k.data(), v.data()};
  }
  std::vector<float> key(int64_t slot) const {
    std::vector<float> out(static_cast<size_t>(layout.num_kv_heads * layout.head_dim));
    for (int32_t h = 0; h < layout.num_kv_heads; ++h) kv_read_key(layout, layer, slot, h, out.data() + h * layout.head_dim);
    return out;
  }
  std::vector<float> value(int64_t slot) const {
    std::vector<float> out(static_cast<size_t>(layout.num_kv_heads * layout.head_dim));
    for (int32_t h = 0; h < layout.num_kv_heads; ++h) kv_read_value(layout, layer, slot, h, out.data() + h * layout.head_dim);
    return out;
  }
};

std::vector<float> random_rows(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> out(n);
  for (float& x : out) x = d(rng);
  return out;
}

class KvOpsTest : public ::testing::TestWithParam<DType> {};

TEST_P(KvOpsTest, MovesAndCopiesAreExact) {
  Pool p(GetParam(), 4);
  std::mt19937 rng(5);
  const int64_t n = 4 * 16, width = p.layout.num_kv_heads * p.layout.head_dim;
  std::vector<float> k = random_rows(static_cast<size_t>(n * width), rng), v = random_rows(static_cast<size_t>(n * width), rng);
  std::vector<int64_t> slots(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) slots[static_cast<size_t>(i)] = i;
  kv_write(p.layout, p.layer, k.data(), v.data(), slots.data(), n);
  const auto k3 = p.key(3), v3 = p.value(3), k40 = p.key(40), v40 = p.value(40), k4 = p.key(4), v20 = p.value(20);
  kv_move_slot(p.layout, p.layer, 40, 5);   // across blocks, other offset
  kv_move_slot(p.layout, p.layer, 3, 19);   // into another block
  EXPECT_EQ(p.key(5), k40);
  EXPECT_EQ(p.value(5), v40);
  EXPECT_EQ(p.key(19), k3);
  EXPECT_EQ(p.value(19), v3);
  EXPECT_EQ(p.key(4), k4);  // neighbours untouched
  EXPECT_EQ(p.value(20), v20);
  const auto k33 = p.key(33);
  kv_copy_block(p.layout, p.layer, 2, 3);
  for (int64_t o = 0; o < 16; ++o) {
    EXPECT_EQ(p.key(48 + o), p.key(32 + o)) << o;
    EXPECT_EQ(p.value(48 + o), p.value(32 + o)) << o;
  }
  EXPECT_EQ(p.key(33), k33);
}

TEST_P(KvOpsTest, ReRotatingAKeyMovesItsPosition) {
  Pool p(GetParam(), 1);
  std::mt19937 rng(9);
  const int64_t width = p.layout.num_kv_heads * p.layout.head_dim;
  RopeParams params;
  params.freq_base = 10000.f;
  // Frequency factors and a magnitude factor (Phi-3 long-rope): a shift must
  // rotate by the same scaled frequencies and must not scale the key again.
  std::vector<float> factors(static_cast<size_t>(p.layout.head_dim / 2));
  for (size_t i = 0; i < factors.size(); ++i) factors[i] = 1.f + 0.5f * static_cast<float>(i);
  params.freq_factors = factors.data();
  params.attn_factor = 1.25f;
  for (int32_t delta : {-16, -1, 7}) {
    std::vector<float> raw = random_rows(static_cast<size_t>(width), rng), v(raw.size(), 0.f);
    std::vector<float> at_p = raw, at_q = raw;
    const int32_t pos = 100, moved = pos + delta;
    rope(at_p.data(), &pos, 1, p.layout.num_kv_heads, p.layout.head_dim, params);
    rope(at_q.data(), &moved, 1, p.layout.num_kv_heads, p.layout.head_dim, params);
    const int64_t slot = 7;
    kv_write(p.layout, p.layer, at_p.data(), v.data(), &slot, 1);
    kv_rotate_key(p.layout, p.layer, slot, delta, params);
    const auto got = p.key(slot);
    // The keys are attn_factor longer than unit-scale ones; Q8_0's rounding grows with them.
    // Q4_0: two roundings (the write, the re-store) of half a 4-bit step
    // each, a step being an eighth of the largest element of the block.
    float largest = 0.f;
    for (float x : at_q) largest = std::max(largest, std::abs(x));
    const float tol = GetParam() == DType::kF32 ? 1e-4f : GetParam() == DType::kF16 ? 4e-3f
                      : GetParam() == DType::kQ4_0 ? 0.15f * largest : 4.5e-2f;
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], at_q[i], tol) << "delta " << delta << " element " << i;
  }
}

// Statistics for n queries over n slots (one prefill), whole or under a
// window; with 40 slots and a window of 7 the last rows see only slots past
// 16, from inside a block (the vector kernels score whole 16-slot vectors).
void check_attention_statistics(DType dtype, int32_t n, int32_t window) {
  Pool p(dtype, 3);
  std::mt19937 rng(13);
  const int32_t num_heads = 4, hd = p.layout.head_dim;
  const int64_t width = p.layout.num_kv_heads * hd;
  std::vector<float> k = random_rows(static_cast<size_t>(n * width), rng), v = random_rows(static_cast<size_t>(n * width), rng);
  std::vector<float> q = random_rows(static_cast<size_t>(n * num_heads * hd), rng);
  std::vector<int64_t> slots(n);
  const std::vector<int32_t> table = {2, 0, 1};  // scattered blocks
  for (int32_t i = 0; i < n; ++i) slots[static_cast<size_t>(i)] = int64_t{table[i / 16]} * 16 + i % 16;
  kv_write(p.layout, p.layer, k.data(), v.data(), slots.data(), n);
  AttentionParams ap;
  ap.num_heads = num_heads;
  ap.scale = 0.125f;
  ap.window = window;
  std::vector<float> fast(static_cast<size_t>(n) * p.layout.num_kv_heads * n, 0.f), ref = fast;
  std::vector<float> out(q.size()), out_ref(q.size());
  AttentionSeq seq{0, n, n, table, fast.data()};
  paged_attention(p.layout, p.layer, q.data(), std::span(&seq, 1), ap, out.data());
  seq.attn_stats = ref.data();
  paged_attention_reference(p.layout, p.layer, q.data(), std::span(&seq, 1), ap, out_ref.data());
  for (size_t i = 0; i < fast.size(); ++i) ASSERT_NEAR(fast[i], ref[i], 1e-4f) << i;
  for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], out_ref[i], 2e-5f) << i;
  // Each query's row sums to its heads' total weight: 2 query heads per KV head.
  for (int32_t r = 0; r < n; ++r)
    for (int32_t h = 0; h < p.layout.num_kv_heads; ++h) {
      float sum = 0;
      for (int32_t s = 0; s < n; ++s) sum += fast[(static_cast<size_t>(r) * p.layout.num_kv_heads + h) * n + s];
      EXPECT_NEAR(sum, 2.f, 1e-4f);
    }
}

TEST_P(KvOpsTest, AttentionStatisticsAreTheReferenceWeights) {
  check_attention_statistics(GetParam(), 20, 0);
  check_attention_statistics(GetParam(), 40, 7);
}

INSTANTIATE_TEST_SUITE_P(AllKvTypes, KvOpsTest, ::testing::Values(DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace kvlm
