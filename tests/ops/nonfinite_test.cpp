// Non-finite activations (a model whose values overflowed, or a hostile file)
// in every kernel that searches its input for a maximum: the search stays in
// its block, and the result is NaN rather than a read past the buffer. The
// buffers are exactly sized heap blocks so ASan sees any overrun.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "backend/cpu/cpu_path.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/matmul_impl.h"
#include "backend/quant.h"

namespace kvlm {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> random_row(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = u(rng);
  return x;
}

TEST(NonFinite, ActivationQuantizersStayInTheirBlock) {
  for (float poison : {kNaN, -kNaN, kInf, -kInf}) {
    for (int64_t at : {0, 1, 7, 8, 100, 255}) {
      // One 256-value block in a heap buffer of exactly that size.
      auto x = std::make_unique<float[]>(256);
      const auto r = random_row(256, static_cast<uint64_t>(at));
      std::copy(r.begin(), r.end(), x.get());
      x[static_cast<size_t>(at)] = poison;
      auto k = std::make_unique<cpu::ActBlockQ8K[]>(1);
      cpu::kernels_for(active_cpu_path()).act_q8_k(x.get(), 256, k.get());
      EXPECT_TRUE(std::isnan(k[0].d)) << poison << " at " << at;
      // A block that is all NaN: the SIMD max is NaN, which no |x| equals.
      std::fill(x.get(), x.get() + 256, poison);
      cpu::kernels_for(active_cpu_path()).act_q8_k(x.get(), 256, k.get());
      EXPECT_TRUE(std::isnan(k[0].d));

      auto qs = std::make_unique<int8_t[]>(256);
      auto d = std::make_unique<float[]>(8);
      auto sums = std::make_unique<int32_t[]>(8);
      std::copy(r.begin(), r.end(), x.get());
      x[static_cast<size_t>(at)] = poison;
      cpu::kernels_for(active_cpu_path()).act_q8_0(x.get(), 256, {qs.get(), d.get(), sums.get()});
      EXPECT_TRUE(std::isnan(d[at / 32])) << poison << " at " << at;
      EXPECT_FALSE(std::isnan(d[(at / 32 + 1) % 8]));  // other blocks keep their scale
    }
  }
}

// The whole matmul with a NaN activation, per weight dtype: NaN out, nothing read out of bounds.
TEST(NonFinite, MatmulPropagatesNaN) {
  const int64_t rows = 8, cols = 512;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ6_K}) {
    const auto wf = random_row(rows * cols, 7);
    std::vector<uint8_t> w(row_bytes(t, cols) * rows);
    for (int64_t r = 0; r < rows; ++r) quantize_row(t, wf.data() + r * cols, w.data() + r * row_bytes(t, cols), cols);
    const WeightMatrix m = pack_for_matmul(WeightMatrix{w.data(), t, rows, cols, nullptr});
    auto x = std::make_unique<float[]>(static_cast<size_t>(cols));
    const auto r = random_row(cols, 3);
    std::copy(r.begin(), r.end(), x.get());
    x[300] = kNaN;
    auto y = std::make_unique<float[]>(static_cast<size_t>(rows));
    matmul(m, x.get(), 1, y.get());
    for (int64_t i = 0; i < rows; ++i) EXPECT_TRUE(std::isnan(y[static_cast<size_t>(i)])) << dtype_name(t) << " row " << i;
  }
}

}  // namespace
}  // namespace kvlm
