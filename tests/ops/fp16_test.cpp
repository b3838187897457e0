// fp16 / bf16 conversions: exact round trips, round-to-nearest-even at ties,
// subnormals, overflow, NaN, and the bulk paths equal to the scalar ones.
#include "backend/fp16.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace kvlm {
namespace {

float from_bits(uint32_t u) { return std::bit_cast<float>(u); }

// Nearest fp16 by exhaustive search over the finite halves of the same sign,
// ties to the even code: slow but obviously right.
uint16_t nearest_half_by_search(float f) {
  const double v = std::fabs(static_cast<double>(f));
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (v >= 65520.0) return sign | 0x7C00;
  uint16_t best = 0;
  double best_err = std::numeric_limits<double>::infinity();
  for (uint32_t h = 0; h < 0x7C00; ++h) {
    const double err = std::fabs(static_cast<double>(fp16_to_f32(static_cast<uint16_t>(h))) - v);
    if (err < best_err || (err == best_err && (h & 1) == 0)) {
      best = static_cast<uint16_t>(h);
      best_err = err;
    }
  }
  return sign | best;
}

TEST(Fp16, KnownValues) {
  EXPECT_EQ(f32_to_fp16(1.f), 0x3C00);
  EXPECT_EQ(f32_to_fp16(-2.f), 0xC000);
  EXPECT_EQ(f32_to_fp16(65504.f), 0x7BFF);
  EXPECT_EQ(f32_to_fp16(65519.f), 0x7BFF);                  // below the tie: largest finite
  EXPECT_EQ(f32_to_fp16(65520.f), 0x7C00);                  // tie rounds to even: infinity
  EXPECT_EQ(f32_to_fp16(std::ldexp(1.f, -24)), 0x0001);     // smallest subnormal
  EXPECT_EQ(f32_to_fp16(std::ldexp(1.f, -25)), 0x0000);     // tie with 0: even is 0
  EXPECT_EQ(f32_to_fp16(std::ldexp(3.f, -26)), 0x0001);     // 0.75 ulp rounds up
  EXPECT_EQ(f32_to_fp16(std::ldexp(3.f, -25)), 0x0002);     // 1.5 ulp tie: even is 2
  EXPECT_EQ(f32_to_fp16(std::ldexp(1.f, -14)), 0x0400);     // smallest normal
  EXPECT_EQ(f32_to_fp16(1.f + std::ldexp(1.f, -11)), 0x3C00);        // tie, even mantissa stays
  EXPECT_EQ(f32_to_fp16(1.f + 3 * std::ldexp(1.f, -11)), 0x3C02);    // tie, odd mantissa rounds up
  EXPECT_EQ(f32_to_fp16(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(f32_to_fp16(-0.f), 0x8000);
  const uint16_t nan = f32_to_fp16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x03FF, 0);
  EXPECT_EQ(fp16_to_f32(0x0001), std::ldexp(1.f, -24));
  EXPECT_EQ(fp16_to_f32(0x03FF), std::ldexp(1023.f, -24));
  EXPECT_EQ(fp16_to_f32(0xFC00), -std::numeric_limits<float>::infinity());
}

TEST(Fp16, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    const float f = fp16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE((h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0) << h;
      EXPECT_TRUE(std::isnan(fp16_to_f32(f32_to_fp16(f)))) << h;
      continue;
    }
    ASSERT_EQ(f32_to_fp16(f), h) << "half 0x" << std::hex << h;
  }
}

TEST(Fp16, RandomFloatsRoundToNearestEven) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> exp_dist(-27, 17);
  std::uniform_real_distribution<float> mant(1.f, 2.f);
  for (int i = 0; i < 3000; ++i) {
    float f = std::ldexp(mant(rng), exp_dist(rng));
    if (i % 2) f = -f;
    ASSERT_EQ(f32_to_fp16(f), nearest_half_by_search(f)) << f;
  }
}

TEST(Fp16, BulkMatchesScalar) {
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.f, 100.f);
  const int64_t n = 45;  // not a multiple of 8: exercises the tail
  std::vector<float> src(n);
  for (auto& x : src) x = dist(rng);
  src[3] = 1e-6f;  // subnormal in fp16
  src[5] = 1e6f;   // overflows to inf
  std::vector<uint16_t> h(n);
  f32_to_fp16_row(src.data(), h.data(), n);
  std::vector<float> back(n);
  fp16_to_f32_row(h.data(), back.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(h[i], f32_to_fp16(src[i])) << i;
    EXPECT_EQ(back[i], fp16_to_f32(h[i])) << i;
  }
}

TEST(Bf16, RoundToNearestEvenAndNaN) {
  EXPECT_EQ(f32_to_bf16(1.f), 0x3F80);
  EXPECT_EQ(f32_to_bf16(from_bits(0x3F808000u)), 0x3F80);  // tie, even stays
  EXPECT_EQ(f32_to_bf16(from_bits(0x3F818000u)), 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(f32_to_bf16(from_bits(0x3F808001u)), 0x3F81);  // above the tie
  EXPECT_EQ(f32_to_bf16(from_bits(0x7F7FFFFFu)), 0x7F80);  // max float rounds to inf
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(from_bits(0x7F800001u)))));  // NaN stays NaN
  EXPECT_EQ(bf16_to_f32(0xC040), -3.f);
}

TEST(Bf16, BulkMatchesScalarAndRoundTrips) {
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.f, 3.f);
  const int64_t n = 37;
  std::vector<uint16_t> h(n);
  for (auto& v : h) v = f32_to_bf16(dist(rng));
  std::vector<float> f(n);
  bf16_to_f32_row(h.data(), f.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(f[i], bf16_to_f32(h[i]));
    EXPECT_EQ(f32_to_bf16(f[i]), h[i]);  // bf16 -> f32 -> bf16 is exact
  }
}

}  // namespace
}  // namespace kvlm
