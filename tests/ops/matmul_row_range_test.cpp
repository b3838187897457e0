// The SIMD kernels called on row ranges that start in the middle of a strip
// pair (paired layouts: PackedWeights), as a row chunk of 8 rows can: the
// AVX-512 drivers then take strips of two different pairs together, and the
// AVX2/AVX-VNNI drivers fall back from pairs to single strips. matmul()'s
// own chunks start on pairs, so only a direct call reaches these branches.
// Every row must equal the scalar twin's bits, and rows outside the range
// stay untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>
#include <vector>

#include "backend/cpu/cpu_path.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/matmul_impl.h"
#include "ops/ops_test_util.h"

namespace kvlm {
namespace {

cpu::RowRangeKernel kernel_of(const cpu::CpuKernels& k, DType t) {
  switch (t) {
    case DType::kQ8_0: return k.q8_0;
    case DType::kQ4_0: return k.q4_0;
    case DType::kQ4_K: return k.q4_k;
    case DType::kQ6_K: return k.q6_k;
    case DType::kF16: return k.f16;
    default: return k.f32;
  }
}

// The activations of `num_tokens` rows of x in the form the dtype's kernels read.
struct Acts {
  std::vector<int8_t> qs;
  std::vector<float> d, f32;
  std::vector<int32_t> sum;
  std::vector<cpu::ActBlockQ8K> k;
  std::vector<cpu::ActBlockQ8Tile> tiles;
  cpu::MatmulActs view;

  Acts(const cpu::CpuKernels& kernels, DType t, const std::vector<float>& x, int64_t num_tokens, int64_t cols) {
    view.cols = cols;
    view.num_tokens = num_tokens;
    if (t == DType::kQ8_0 || t == DType::kQ4_0) {
      qs.resize(static_cast<size_t>(num_tokens * cols));
      d.resize(static_cast<size_t>(num_tokens * cols / 32));
      sum.resize(d.size());
      if (kernels.act_q8_tiles) tiles.resize(d.size());
      for (int64_t i = 0; i < num_tokens; ++i) {
        kernels.act_q8_0(x.data() + i * cols, cols,
                         cpu::act_q8_out_for_token(qs.data(), d.data(), sum.data(),
                                                   kernels.act_q8_tiles ? tiles.data() : nullptr, cols, num_tokens, i));
      }
      view.q8_qs = qs.data();
      view.q8_d = d.data();
      view.q8_sum = sum.data();
      if (kernels.act_q8_tiles) view.q8_tiles = tiles.data();
    } else if (t == DType::kQ4_K || t == DType::kQ6_K) {
      k.resize(static_cast<size_t>(num_tokens * cols / 256));
      for (int64_t i = 0; i < num_tokens; ++i) kernels.act_q8_k(x.data() + i * cols, cols, k.data() + i * cols / 256);
      view.q8k = k.data();
    } else {
      f32 = x;
      view.f32 = f32.data();
    }
  }
};

class RowRangeTest : public ::testing::TestWithParam<std::tuple<DType, CpuPath>> {
 protected:
  void SetUp() override {
    saved_ = active_cpu_path();
    if (!set_cpu_path(std::get<1>(GetParam()))) GTEST_SKIP() << "this CPU cannot run this path";
  }
  void TearDown() override { set_cpu_path(saved_); }

 private:
  CpuPath saved_ = CpuPath::kScalar;
};

TEST_P(RowRangeTest, RangesStartingMidPairMatchTheScalarTwin) {
  const auto [dtype, path] = GetParam();
  constexpr int64_t kRows = 56, kCols = 512;  // 7 strips: 3 pairs and a lone strip
  const auto wf = test::random_floats(static_cast<size_t>(kRows * kCols), 11, 0.02f);
  const std::vector<uint8_t> wq = test::quantize_matrix(dtype, wf, kRows, kCols);
  const WeightMatrix plain{wq.data(), dtype, kRows, kCols, nullptr};
  const WeightMatrix packed = pack_for_matmul(plain);  // this path's (shared SIMD) layout
  ASSERT_NE(packed.packed, nullptr);
  const cpu::CpuKernels& simd = cpu::kernels_for(path);
  const cpu::CpuKernels& scalar = cpu::kernels_for(CpuPath::kScalar);
  for (int64_t num_tokens : {1, 3, 11}) {
    const auto x = test::random_floats(static_cast<size_t>(num_tokens * kCols), 12, 1.f, 0.1f);
    // Activations as the scalar path makes them: the same values every path makes.
    const Acts acts(scalar, dtype, x, num_tokens, kCols);
    std::vector<float> want(static_cast<size_t>(num_tokens * kRows));
    kernel_of(scalar, dtype)(plain, acts.view, 0, kRows, 0, num_tokens, want.data());
    const Acts simd_acts(simd, dtype, x, num_tokens, kCols);
    for (const auto& [r0, r1] : std::vector<std::pair<int64_t, int64_t>>{{8, 40}, {8, 56}, {24, 56}, {40, 56}, {0, 56}}) {
      SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " rows " << r0 << ".." << r1 << " T=" << num_tokens);
      std::vector<float> got(want.size(), NAN);
      kernel_of(simd, dtype)(packed, simd_acts.view, r0, r1, 0, num_tokens, got.data());
      for (int64_t t = 0; t < num_tokens; ++t) {
        for (int64_t r = 0; r < kRows; ++r) {
          const float g = got[static_cast<size_t>(t * kRows + r)];
          if (r < r0 || r >= r1) {
            ASSERT_TRUE(std::isnan(g)) << "row " << r << " outside the range was written";
          } else {
            ASSERT_EQ(g, want[static_cast<size_t>(t * kRows + r)]) << "row " << r << " token " << t;
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(PairedTypes, RowRangeTest,
                         ::testing::Combine(::testing::Values(DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ6_K,
                                                              DType::kF16),
                                            ::testing::Values(CpuPath::kAvx2, CpuPath::kAvxVnni, CpuPath::kAvx512)),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) + "_" +
                                  cpu_path_name(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace kvlm
