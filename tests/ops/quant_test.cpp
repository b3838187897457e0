// quantize_row -> dequantize_row round trips on random data: per-type error
// bounds, per-element bounds where the format gives one, and block layouts
// checked on hand-built blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "backend/fp16.h"
#include "backend/quant.h"
#include "ops/ops_test_util.h"

namespace kvlm {
namespace {

struct RoundTripCase {
  DType dtype;
  double max_nrmse;  // normalized RMS error bound on N(0, 1) data
};

class QuantRoundTrip : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(QuantRoundTrip, ErrorWithinBound) {
  const RoundTripCase c = GetParam();
  const int64_t n = 256 * 24;
  const auto x = test::random_floats(n, 11, 1.f, 0.05f);
  std::vector<uint8_t> q(row_bytes(c.dtype, n));
  quantize_row(c.dtype, x.data(), q.data(), n);
  std::vector<float> back(n);
  dequantize_row(c.dtype, q.data(), back.data(), n);
  const double err = test::normalized_rmse(back, x);
  EXPECT_LT(err, c.max_nrmse) << dtype_name(c.dtype);
  // A round trip that loses nothing would mean the type was not applied.
  if (c.dtype != DType::kF32) {
    EXPECT_GT(err, 0.0);
  }
  // Quantizing the dequantized values again must not make them worse.
  std::vector<uint8_t> q2(q.size());
  quantize_row(c.dtype, back.data(), q2.data(), n);
  std::vector<float> back2(n);
  dequantize_row(c.dtype, q2.data(), back2.data(), n);
  EXPECT_LT(test::normalized_rmse(back2, x), c.max_nrmse * 1.05);
}

// Bounds sit about 20% above the measured error of ggml's quantizers on this data.
INSTANTIATE_TEST_SUITE_P(AllTypes, QuantRoundTrip,
                         ::testing::Values(RoundTripCase{DType::kF32, 1e-12},
                                           RoundTripCase{DType::kF16, 2.5e-4},   // measured 2.1e-4
                                           RoundTripCase{DType::kBF16, 2e-3},    // 1.7e-3
                                           RoundTripCase{DType::kQ8_0, 6.3e-3},  // 5.3e-3
                                           RoundTripCase{DType::kQ4_0, 0.1},     // 8.4e-2
                                           RoundTripCase{DType::kQ4_K, 0.085},   // 7.1e-2
                                           RoundTripCase{DType::kQ6_K, 2.1e-2},  // 1.7e-2
                                           RoundTripCase{DType::kQ8_K, 8e-3}),   // 6.7e-3
                         [](const auto& info) { return std::string(dtype_name(info.param.dtype)); });

// Q8_0 rounds to the nearest level: every element is within half a step.
TEST(QuantQ8_0, ElementErrorAtMostHalfStep) {
  const int64_t n = 32 * 50;
  const auto x = test::random_floats(n, 12);
  std::vector<BlockQ8_0> q(n / 32);
  quantize_row(DType::kQ8_0, x.data(), q.data(), n);
  std::vector<float> back(n);
  dequantize_row(DType::kQ8_0, q.data(), back.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const float d = fp16_to_f32(q[i / 32].d);
    // half a step, plus the fp16 rounding of d times |q| <= 127
    ASSERT_LE(std::fabs(back[i] - x[i]), 0.5f * d + 127.f * d * 1e-3f) << i;
  }
}

// Q4_0: the largest-magnitude value is exact (it maps to -8); others within one step.
TEST(QuantQ4_0, ExtremeIsExactAndOthersWithinAStep) {
  const int64_t n = 32 * 40;
  const auto x = test::random_floats(n, 13);
  std::vector<BlockQ4_0> q(n / 32);
  quantize_row(DType::kQ4_0, x.data(), q.data(), n);
  std::vector<float> back(n);
  dequantize_row(DType::kQ4_0, q.data(), back.data(), n);
  for (int64_t b = 0; b < n / 32; ++b) {
    int arg = 0;
    for (int j = 1; j < 32; ++j)
      if (std::fabs(x[b * 32 + j]) > std::fabs(x[b * 32 + arg])) arg = j;
    const float d = std::fabs(fp16_to_f32(q[b].d));
    EXPECT_NEAR(back[b * 32 + arg], x[b * 32 + arg], std::fabs(x[b * 32 + arg]) * 1e-3f);
    for (int j = 0; j < 32; ++j) ASSERT_LE(std::fabs(back[b * 32 + j] - x[b * 32 + j]), d * 1.001f);
  }
}

TEST(QuantQ8_K, BlockSumsAndScale) {
  const int64_t n = 256 * 3;
  auto x = test::random_floats(n, 14);
  x[300] = -9.f;  // the signed extreme of block 1 maps to -127 (iscale = -127 / max)
  std::vector<BlockQ8_K> q(n / 256);
  quantize_row(DType::kQ8_K, x.data(), q.data(), n);
  EXPECT_EQ(q[1].qs[300 - 256], -127);
  EXPECT_FLOAT_EQ(q[1].d * -127.f, -9.f);
  for (const auto& b : q) {
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += b.qs[16 * g + j];
      EXPECT_EQ(b.bsums[g], sum);
    }
    for (int j = 0; j < 256; ++j) EXPECT_GE(b.qs[j], -127);
  }
}

// Hand-built blocks pin the bit layouts (ggml-common.h) independently of the quantizers.
TEST(QuantLayout, Q4_0NibbleOrder) {
  BlockQ4_0 b{};
  b.d = f32_to_fp16(0.5f);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  float y[32];
  dequantize_row(DType::kQ4_0, &b, y, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * (j - 8));
    EXPECT_EQ(y[j + 16], 0.5f * (7 - j));
  }
}

TEST(QuantLayout, Q4_KScalesMinsAndNibbles) {
  BlockQ4_K b{};
  b.d = f32_to_fp16(0.25f);
  b.dmin = f32_to_fp16(0.5f);
  // Sub-block j: scale 10 + j + (j >= 4 ? 40 : 0), min 3 + j + (j >= 4 ? 20 : 0), so
  // sub-blocks 4-7 need the high bits stored in bytes 0-7.
  const int sc[8] = {10, 11, 12, 13, 54, 55, 56, 57};
  const int mn[8] = {3, 4, 5, 6, 27, 28, 29, 30};
  for (int j = 0; j < 4; ++j) {
    b.scales[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    b.scales[j + 4] = static_cast<uint8_t>(mn[j] | ((mn[j + 4] >> 4) << 6));
    b.scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4));
  }
  for (int i = 0; i < 128; ++i) b.qs[i] = static_cast<uint8_t>((i % 16) | (((i + 5) % 16) << 4));
  float y[256];
  dequantize_row(DType::kQ4_K, &b, y, 256);
  for (int e = 0; e < 256; ++e) {
    const int j = e / 32;            // sub-block
    const int byte = 32 * (e / 64) + e % 32;
    const int q = (e % 64) < 32 ? b.qs[byte] & 0xF : b.qs[byte] >> 4;
    EXPECT_FLOAT_EQ(y[e], 0.25f * sc[j] * q - 0.5f * mn[j]) << e;
  }
}

TEST(QuantLayout, Q6_KBitPlanes) {
  BlockQ6_K b{};
  b.d = f32_to_fp16(0.125f);
  for (int g = 0; g < 16; ++g) b.scales[g] = static_cast<int8_t>(g - 7);
  // Value e gets level (e * 7) % 64; write it through the documented layout.
  for (int e = 0; e < 256; ++e) {
    const int level = (e * 7) % 64;
    const int h = e / 128, r = e % 128, l = r % 32, quarter = r / 32;
    uint8_t* ql = b.ql + 64 * h;
    uint8_t* qh = b.qh + 32 * h;
    const int ql_index = l + (quarter % 2) * 32;
    ql[ql_index] |= static_cast<uint8_t>((level & 0xF) << (quarter >= 2 ? 4 : 0));
    qh[l] |= static_cast<uint8_t>((level >> 4) << (2 * quarter));
  }
  float y[256];
  dequantize_row(DType::kQ6_K, &b, y, 256);
  for (int e = 0; e < 256; ++e) EXPECT_FLOAT_EQ(y[e], 0.125f * (e / 16 - 7) * ((e * 7) % 64 - 32)) << e;
}

// All-zero input must give all-zero output, not NaN (the guarded divisions).
TEST(QuantZeros, EveryTypeGivesZeros) {
  const int64_t n = 512;
  std::vector<float> zeros(n, 0.f);
  for (DType t : {DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ6_K, DType::kQ8_K}) {
    std::vector<uint8_t> q(row_bytes(t, n), 0xAB);
    quantize_row(t, zeros.data(), q.data(), n);
    std::vector<float> back(n, 1.f);
    dequantize_row(t, q.data(), back.data(), n);
    for (float v : back) ASSERT_EQ(v, 0.f) << dtype_name(t);
  }
}

}  // namespace
}  // namespace kvlm
