// The element-wise and row-wise kernels of ops.h against their scalar
// references (reference_ops.h) on random data, plus properties that hold
// for the true functions (softmax sums to 1, RoPE preserves norms and depends
// only on relative positions).
#include "backend/cpu/ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_path.h"
#include "backend/cpu/ops_impl.h"
#include "backend/cpu/reference_ops.h"
#include "backend/cpu/simd.h"
#include "backend/threads.h"
#include "ops/ops_test_util.h"

namespace kvlm {
namespace {

// Lengths around the 8-lane width, plus a model-sized one.
const int64_t kLengths[] = {1, 7, 8, 9, 33, 257, 4096};

// |a - b| <= rel |b| + abs, element by element.
void expect_close(const std::vector<float>& a, const std::vector<float>& b, double rel, double abs,
                  const char* what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_NEAR(a[i], b[i], rel * std::fabs(b[i]) + abs) << what << " at " << i << " of " << a.size();
  }
}

TEST(Ops, RmsNorm) {
  for (int64_t n : kLengths) {
    const int64_t rows = 3;
    const auto x = test::random_floats(rows * n, 1, 2.f, 0.3f);
    const auto w = test::random_floats(n, 2, 1.f, 1.f);
    std::vector<float> y(x.size()), y_ref(x.size());
    rms_norm(x.data(), w.data(), y.data(), rows, n, 1e-5f);
    ref::rms_norm(x.data(), w.data(), y_ref.data(), rows, n, 1e-5f);
    expect_close(y, y_ref, 2e-6, 1e-7, "rms_norm");
    auto inplace = x;  // x and y may alias
    rms_norm(inplace.data(), w.data(), inplace.data(), rows, n, 1e-5f);
    EXPECT_EQ(inplace, y);
  }
}

TEST(Ops, LayerNorm) {
  for (int64_t n : kLengths) {
    if (n == 1) continue;  // variance 0: output is just the bias
    const int64_t rows = 3;
    const auto x = test::random_floats(rows * n, 3, 2.f, 5.f);  // large mean: tests centring
    const auto w = test::random_floats(n, 4, 1.f, 1.f);
    const auto b = test::random_floats(n, 5);
    for (const float* bias : {b.data(), static_cast<const float*>(nullptr)}) {
      std::vector<float> y(x.size()), y_ref(x.size());
      layer_norm(x.data(), w.data(), bias, y.data(), rows, n, 1e-5f);
      ref::layer_norm(x.data(), w.data(), bias, y_ref.data(), rows, n, 1e-5f);
      expect_close(y, y_ref, 1e-5, 1e-6, "layer_norm");
    }
  }
}

struct RopeCase {
  RopeStyle style;
  int64_t head_dim;
  int32_t rot_dim;
};

class RopeTest : public ::testing::TestWithParam<RopeCase> {};

TEST_P(RopeTest, MatchesReference) {
  const RopeCase c = GetParam();
  const int64_t num_tokens = 5, num_heads = 3;
  RopeParams p{c.style, c.rot_dim, 10000.f, 1.f};
  const std::vector<int32_t> pos = {0, 1, 17, 511, 4000};
  const auto x = test::random_floats(num_tokens * num_heads * c.head_dim, 6);
  auto y = x, y_ref = x;
  rope(y.data(), pos.data(), num_tokens, num_heads, c.head_dim, p);
  ref::rope(y_ref.data(), pos.data(), num_tokens, num_heads, c.head_dim, p);
  expect_close(y, y_ref, 0, 2e-6, "rope");
  const int64_t rot = rope_rot_dim(p, c.head_dim);
  for (int64_t h = 0; h < num_heads; ++h) {
    for (int64_t i = 0; i < c.head_dim; ++i) {
      // Position 0 is the identity; dims past rot_dim never move.
      EXPECT_EQ(y[h * c.head_dim + i], x[h * c.head_dim + i]);
      const size_t k = static_cast<size_t>((4 * num_heads + h) * c.head_dim + i);
      if (i >= rot) {
        EXPECT_EQ(y[k], x[k]);
      }
    }
    // At position 4000 the rotated part really changed.
    const size_t k0 = static_cast<size_t>((4 * num_heads + h) * c.head_dim);
    EXPECT_GT(std::fabs(y[k0] - x[k0]) + std::fabs(y[k0 + 1] - x[k0 + 1]), 1e-3);
  }
}

// q(m) . k(n) depends only on m - n, and rotations keep each head's norm.
TEST_P(RopeTest, RelativePositionAndNorm) {
  const RopeCase c = GetParam();
  RopeParams p{c.style, c.rot_dim, 10000.f, 1.f};
  const auto q = test::random_floats(c.head_dim, 7);
  const auto k = test::random_floats(c.head_dim, 8);
  auto score = [&](int32_t m, int32_t n) {
    auto qr = q, kr = k;
    rope(qr.data(), &m, 1, 1, c.head_dim, p);
    rope(kr.data(), &n, 1, 1, c.head_dim, p);
    double norm_q = 0, norm_qr = 0;
    for (int64_t i = 0; i < c.head_dim; ++i) {
      norm_q += q[i] * q[i];
      norm_qr += qr[i] * qr[i];
    }
    EXPECT_NEAR(norm_qr, norm_q, 1e-5 * norm_q);
    return ref::dot_f32(qr.data(), kr.data(), c.head_dim);
  };
  // f32 angles drift by ~1e-7 * position radians; |q| |k| is about head_dim.
  EXPECT_NEAR(score(10, 3), score(107, 100), 2e-3);
  EXPECT_NEAR(score(5, 5), score(300, 300), 2e-3);
  EXPECT_GT(std::fabs(score(10, 3) - score(10, 4)), 1e-2);  // and it does depend on m - n
}

INSTANTIATE_TEST_SUITE_P(Styles, RopeTest,
                         ::testing::Values(RopeCase{RopeStyle::kNormal, 64, 64}, RopeCase{RopeStyle::kNeox, 64, 64},
                                           RopeCase{RopeStyle::kNormal, 20, 0}, RopeCase{RopeStyle::kNeox, 20, 0},
                                           RopeCase{RopeStyle::kNormal, 128, 64}, RopeCase{RopeStyle::kNeox, 128, 36}));

// The f32 angle recurrence stays close to the exact angles (drift grows with position).
TEST(Ops, RopeAnglesCloseToExact) {
  const int64_t rot_dim = 64;
  RopeParams p{RopeStyle::kNormal, static_cast<int32_t>(rot_dim), 10000.f, 0.5f};
  std::vector<float> cs(rot_dim / 2), sn(rot_dim / 2);
  for (int32_t pos : {0, 1, 100, 4095}) {
    rope_angles(pos, p, rot_dim, cs.data(), sn.data());
    for (int64_t i = 0; i < rot_dim / 2; ++i) {
      const double angle = 0.5 * pos * std::pow(10000.0, -2.0 * static_cast<double>(i) / rot_dim);
      EXPECT_NEAR(cs[i], std::cos(angle), 1e-6 + 2e-7 * pos) << pos << " " << i;
      EXPECT_NEAR(sn[i], std::sin(angle), 1e-6 + 2e-7 * pos) << pos << " " << i;
    }
  }
}

// Frequency factors divide each pair's angle and attn_factor scales cos and
// sin (llama3's rope_freqs, Phi-3's long-rope), on every path as in the reference.
TEST(Ops, RopeFreqFactorsAndAttnFactor) {
  const int64_t head_dim = 48, num_heads = 2, num_tokens = 3;
  std::vector<float> factors(head_dim / 2);
  for (size_t i = 0; i < factors.size(); ++i) factors[i] = 1.f + 7.f * static_cast<float>(i) / 23.f;
  for (RopeStyle style : {RopeStyle::kNormal, RopeStyle::kNeox}) {
    RopeParams p{style, 0, 10000.f, 1.f, factors.data(), 1.3f};
    const std::vector<int32_t> pos = {3, 250, 9000};
    const auto x = test::random_floats(num_tokens * num_heads * head_dim, 21);
    auto y = x, y_ref = x;
    rope(y.data(), pos.data(), num_tokens, num_heads, head_dim, p);
    ref::rope(y_ref.data(), pos.data(), num_tokens, num_heads, head_dim, p);
    expect_close(y, y_ref, 0, 4e-6, "rope with factors");
  }
  RopeParams p{RopeStyle::kNormal, 0, 10000.f, 1.f, factors.data(), 1.3f};
  std::vector<float> cs(head_dim / 2), sn(head_dim / 2);
  rope_angles(100, p, head_dim, cs.data(), sn.data());
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    const double angle = 100.0 * std::pow(10000.0, -2.0 * static_cast<double>(i) / head_dim) / factors[i];
    EXPECT_NEAR(cs[i], 1.3 * std::cos(angle), 1e-4) << i;
    EXPECT_NEAR(sn[i], 1.3 * std::sin(angle), 1e-4) << i;
  }
}

TEST(Ops, Softmax) {
  for (int64_t n : kLengths) {
    const int64_t rows = 4;
    auto x = test::random_floats(rows * n, 9, 6.f);
    if (n > 1) {
      x[0] = -std::numeric_limits<float>::infinity();  // a masked score
      x[n + 1] = 80.f;                                  // a dominant one
    }
    auto y = x, y_ref = x;
    softmax(y.data(), rows, n);
    ref::softmax(y_ref.data(), rows, n);
    expect_close(y, y_ref, 2e-6, 1e-12, "softmax");
    for (int64_t r = 0; r < rows; ++r) {
      double total = 0;
      for (int64_t i = 0; i < n; ++i) total += y[r * n + i];
      EXPECT_NEAR(total, 1.0, 1e-5);
    }
    if (n > 1) {
      EXPECT_EQ(y[0], 0.f);
    }
  }
}

// The AVX2 and AVX-512 softmax add e^x in the same chains (ops.cpp,
// exp_sum_chains: even 8-value chunks in one, odd in the other), so rows of
// every length come out the same bits.
TEST(Ops, SoftmaxSimdPathsGiveTheSameBits) {
  if (!cpu_path_supported(CpuPath::kAvx2) || !cpu_path_supported(CpuPath::kAvx512))
    GTEST_SKIP() << "needs the avx2 and avx512 paths";
  for (int64_t n = 1; n <= 80; ++n) {
    for (int64_t len : {n, n + 4000}) {
      auto x = test::random_floats(len, static_cast<uint32_t>(len), 6.f);
      auto y2 = x, y512 = x;
      cpu::ops_kernels_for(CpuPath::kAvx2).softmax(y2.data(), 1, len);
      cpu::ops_kernels_for(CpuPath::kAvx512).softmax(y512.data(), 1, len);
      ASSERT_EQ(y2, y512) << "n=" << len;
    }
  }
}

// e^x over its whole range: the avx512 path scales by 2^n with vscalefps,
// the avx2 path with two exact-then-rounded multiplies; both must round the
// same way where the result is subnormal (softmax weights 87 below the
// maximum) or overflows (silu of large negative gates).
TEST(Ops, ExpGivesTheSameBitsOnBothSimdPathsOverItsRange) {
  if (!cpu_path_supported(CpuPath::kAvx2) || !cpu_path_supported(CpuPath::kAvx512))
    GTEST_SKIP() << "needs the avx2 and avx512 paths";
  const int64_t n = 20000;
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = -110.f + 110.f * static_cast<float>(i) / static_cast<float>(n - 1);  // max 0
  auto y2 = x, y512 = x;
  cpu::ops_kernels_for(CpuPath::kAvx2).softmax(y2.data(), 1, n);
  cpu::ops_kernels_for(CpuPath::kAvx512).softmax(y512.data(), 1, n);
  int subnormal = 0;
  for (float v : y2) subnormal += v != 0.f && std::fpclassify(v) == FP_SUBNORMAL;
  EXPECT_GT(subnormal, 100) << "the row should reach e^x's subnormal results";
  ASSERT_EQ(y2, y512);
  std::vector<float> gate(n), up(n, 1.f), out2(n), out512(n);
  for (int64_t i = 0; i < n; ++i) gate[i] = -100.f + 200.f * static_cast<float>(i) / static_cast<float>(n - 1);
  cpu::ops_kernels_for(CpuPath::kAvx2).swiglu(gate.data(), up.data(), out2.data(), n);
  cpu::ops_kernels_for(CpuPath::kAvx512).swiglu(gate.data(), up.data(), out512.data(), n);
  ASSERT_EQ(out2, out512);
}

// Large element-wise calls are cut into pieces across the threads
// (ops_dispatch.cpp); every op gives the same bits on 1 thread and on 3.
TEST(Ops, ThreadCountDoesNotChangeBits) {
  const int64_t rows = 37, n = 2051;  // 75,887 values: split, with odd pieces and tails
  const auto x = test::random_floats(rows * n, 21, 2.f);
  const auto w = test::random_floats(n, 22, 1.f, 1.f);
  const auto b = test::random_floats(n, 23);
  std::vector<int32_t> pos(rows);
  for (int64_t t = 0; t < rows; ++t) pos[t] = static_cast<int32_t>(3 * t + 1);
  auto run_all = [&]() {
    std::vector<std::vector<float>> out;
    auto y = x;
    rms_norm(x.data(), w.data(), y.data(), rows, n, 1e-5f);
    out.push_back(y);
    layer_norm(x.data(), w.data(), b.data(), y.data(), rows, n, 1e-5f);
    out.push_back(y);
    y = x;
    rope(y.data(), pos.data(), rows, 1, n - 1, RopeParams{RopeStyle::kNeox, 0, 10000.f, 1.f});  // rows of n - 1 as heads
    out.push_back(y);
    y = x;
    softmax(y.data(), rows, n);
    out.push_back(y);
    swiglu(x.data(), y.data(), y.data(), rows * n);
    out.push_back(y);
    geglu(x.data(), y.data(), y.data(), rows * n);
    out.push_back(y);
    gelu(y.data(), rows * n);
    out.push_back(y);
    soft_cap(y.data(), rows * n, 30.f);
    out.push_back(y);
    add_inplace(y.data(), x.data(), rows * n);
    out.push_back(y);
    add_bias(y.data(), b.data(), rows, n);
    out.push_back(y);
    scale_inplace(y.data(), rows * n, 0.37f);
    out.push_back(y);
    return out;
  };
  set_num_threads(1);
  const auto one = run_all();
  set_num_threads(3);
  const auto three = run_all();
  set_num_threads(1);
  ASSERT_EQ(one.size(), three.size());
  for (size_t i = 0; i < one.size(); ++i) EXPECT_EQ(one[i], three[i]) << "op " << i;
}

TEST(Ops, Activations) {
  for (int64_t n : kLengths) {
    auto gate = test::random_floats(n, 10, 4.f);
    gate[0] = -30.f;  // exp overflow side of silu
    if (n > 2) gate[2] = 1e-3f;
    const auto up = test::random_floats(n, 11);
    std::vector<float> out(n), out_ref(n);
    swiglu(gate.data(), up.data(), out.data(), n);
    ref::swiglu(gate.data(), up.data(), out_ref.data(), n);
    expect_close(out, out_ref, 3e-6, 1e-7, "swiglu");
    geglu(gate.data(), up.data(), out.data(), n);
    ref::geglu(gate.data(), up.data(), out_ref.data(), n);
    expect_close(out, out_ref, 3e-6, 5e-6, "geglu");
    auto g = gate, g_ref = gate;
    gelu(g.data(), n);
    ref::gelu(g_ref.data(), n);
    expect_close(g, g_ref, 3e-6, 2e-6, "gelu");
    auto aliased = gate;  // out may alias gate
    swiglu(aliased.data(), up.data(), aliased.data(), n);
    ref::swiglu(gate.data(), up.data(), out_ref.data(), n);
    expect_close(aliased, out_ref, 3e-6, 1e-7, "swiglu aliased");
  }
}

TEST(Ops, SoftCap) {
  for (int64_t n : kLengths) {
    auto x = test::random_floats(n, 12, 40.f);
    if (n > 3) x[3] = 0.01f;  // small inputs keep relative precision
    auto y = x, y_ref = x;
    soft_cap(y.data(), n, 30.f);
    ref::soft_cap(y_ref.data(), n, 30.f);
    expect_close(y, y_ref, 2e-6, 0, "soft_cap");
    for (float v : y) EXPECT_LE(std::fabs(v), 30.f);
  }
}

// Batch invariance of the element-wise ops: activations are [tokens, hidden]
// flat, so an element's place relative to the SIMD width depends on the
// tokens before it. Its result may not (stories260K has hidden = 172).
TEST(Ops, ElementwiseOpsDoNotDependOnPosition) {
  const int64_t n = 45;
  const auto x = test::random_floats(n, 21, 6.f);
  const auto y = test::random_floats(n, 22);
  std::vector<float> whole(n), part(n);
  using Unary = void (*)(float*, int64_t);
  using Binary = void (*)(const float*, const float*, float*, int64_t);
  const std::pair<const char*, Unary> unary[] = {
      {"gelu", [](float* v, int64_t m) { gelu(v, m); }},
      {"soft_cap", [](float* v, int64_t m) { soft_cap(v, m, 5.f); }}};
  const std::pair<const char*, Binary> binary[] = {{"swiglu", swiglu}, {"geglu", geglu}};
  for (int64_t k = 1; k < 8; ++k) {
    for (const auto& [name, f] : unary) {
      whole = x;
      f(whole.data(), n);
      part.assign(x.begin() + k, x.end());
      f(part.data(), n - k);
      for (int64_t i = 0; i < n - k; ++i) ASSERT_EQ(part[i], whole[i + k]) << name << " offset " << k << " i " << i;
    }
    for (const auto& [name, f] : binary) {
      f(x.data(), y.data(), whole.data(), n);
      f(x.data() + k, y.data() + k, part.data(), n - k);
      for (int64_t i = 0; i < n - k; ++i) ASSERT_EQ(part[i], whole[i + k]) << name << " offset " << k << " i " << i;
    }
  }
}

TEST(Ops, ElementwiseArithmetic) {
  for (int64_t n : kLengths) {
    const auto a = test::random_floats(n, 13);
    const auto b = test::random_floats(n, 14);
    auto y = a, y_ref = a;
    add_inplace(y.data(), b.data(), n);
    ref::add_inplace(y_ref.data(), b.data(), n);
    EXPECT_EQ(y, y_ref);
    scale_inplace(y.data(), n, 0.37f);
    ref::scale_inplace(y_ref.data(), n, 0.37f);
    EXPECT_EQ(y, y_ref);
    const auto rows = test::random_floats(3 * n, 15);
    auto yb = rows, yb_ref = rows;
    add_bias(yb.data(), b.data(), 3, n);
    ref::add_bias(yb_ref.data(), b.data(), 3, n);
    EXPECT_EQ(yb, yb_ref);
    double mag = 0;
    for (int64_t i = 0; i < n; ++i) mag += std::fabs(a[i] * b[i]);
    EXPECT_NEAR(dot_f32(a.data(), b.data(), n), ref::dot_f32(a.data(), b.data(), n), 2e-6 * mag);
    auto ya = b, ya_ref = b;
    axpy_f32(-1.7f, a.data(), ya.data(), n);
    ref::axpy_f32(-1.7f, a.data(), ya_ref.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_NEAR(ya[i], ya_ref[i], 2e-7 * (std::fabs(1.7f * a[i]) + std::fabs(b[i]))) << i;
    }
  }
}

#if KVLM_AVX2
// The vector exp and tanh behind softmax, SiLU, GELU and soft-capping.
TEST(Simd, ExpAndTanhAccuracy) {
  double max_exp_err = 0, max_tanh_err = 0;
  alignas(32) float in[8], out[8];
  for (int i = 0; i < 200000; ++i) {
    for (int k = 0; k < 8; ++k) in[k] = -87.f + 175.f * static_cast<float>(i * 8 + k) / 1.6e6f;
    _mm256_store_ps(out, simd::exp_ps(_mm256_load_ps(in)));
    for (int k = 0; k < 8; ++k) {
      const double e = std::exp(static_cast<double>(in[k]));
      max_exp_err = std::max(max_exp_err, std::fabs(out[k] - e) / e);
    }
    for (int k = 0; k < 8; ++k) in[k] = (in[k] + 0.5f) / 8.f;  // [-10.8, 11]
    _mm256_store_ps(out, simd::tanh_ps(_mm256_load_ps(in)));
    for (int k = 0; k < 8; ++k) {
      const double t = std::tanh(static_cast<double>(in[k]));
      if (t != 0) max_tanh_err = std::max(max_tanh_err, std::fabs(out[k] - t) / std::fabs(t));
    }
  }
  EXPECT_LT(max_exp_err, 4e-7);
  EXPECT_LT(max_tanh_err, 4e-7);
  _mm256_store_ps(out, simd::exp_ps(_mm256_setr_ps(-1e9f, -100.f, 0.f, 1.f, 89.f, 1e9f, -87.f, 88.f)));
  EXPECT_EQ(out[0], 0.f);
  EXPECT_EQ(out[1], 0.f);
  EXPECT_EQ(out[2], 1.f);
  EXPECT_TRUE(std::isinf(out[4]) && std::isinf(out[5]));
  EXPECT_GT(out[7], 1e38f);
}
#endif

}  // namespace
}  // namespace kvlm
