// matmul() against matmul_reference() and against an independent double
// dot product of the dequantized operands, for every weight dtype on every
// CPU path this machine supports (scalar, avx2, avxvnni, avx512: each test runs once
// per path), odd row counts, and T = 1 .. 17; and bit-for-bit agreement of
// every path that computes the same output: SIMD kernels and their scalar
// twins, packed and unpacked weights, any tile a token lands in, any thread
// count.
#include "backend/cpu/matmul.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cpu/cpu_path.h"
#include "backend/cpu/matmul_impl.h"
#include "backend/fp16.h"
#include "backend/quant.h"
#include "backend/threads.h"
#include "ops/ops_test_util.h"

namespace kvlm {
namespace {

// The activation format matmul pairs each weight type with (F32: none).
DType act_type_for(DType w) {
  switch (w) {
    case DType::kQ8_0:
    case DType::kQ4_0: return DType::kQ8_0;
    case DType::kQ4_K:
    case DType::kQ6_K: return DType::kQ8_K;
    default: return DType::kF32;
  }
}

struct Problem {
  int64_t rows, cols, num_tokens;
  std::vector<uint8_t> w;     // [rows, cols] of the dtype
  std::vector<float> w_f32;   // the same, dequantized
  std::vector<float> x;       // [num_tokens, cols]
  std::vector<float> x_act;   // x after the activation quantization matmul applies
  WeightMatrix matrix(DType t) const { return {w.data(), t, rows, cols, nullptr}; }
};

// The same weights with num_tokens new activations (seed for x).
Problem with_tokens(DType t, Problem p, int64_t num_tokens, uint32_t seed) {
  p.num_tokens = num_tokens;
  p.x = test::random_floats(static_cast<size_t>(num_tokens * p.cols), seed, 1.f, 0.1f);
  const DType at = act_type_for(t);
  const auto xq = test::quantize_matrix(at, p.x, num_tokens, p.cols);
  p.x_act = test::dequantize_matrix(at, xq.data(), num_tokens, p.cols);
  return p;
}

Problem make_problem(DType t, int64_t rows, int64_t cols, int64_t num_tokens, uint32_t seed) {
  Problem p{rows, cols, 0, {}, {}, {}, {}};
  const auto w = test::random_floats(static_cast<size_t>(rows * cols), seed, 0.02f);
  p.w = test::quantize_matrix(t, w, rows, cols);
  p.w_f32 = test::dequantize_matrix(t, p.w.data(), rows, cols);
  return with_tokens(t, std::move(p), num_tokens, seed + 1);
}

struct MatmulCase {
  DType dtype;
  double rel_tol;  // |y - oracle| <= rel_tol * sum_i |w_i x_i|
};

// Each test runs with matmul() on one CPU path; paths this CPU lacks are skipped.
class MatmulTest : public ::testing::TestWithParam<std::tuple<MatmulCase, CpuPath>> {
 protected:
  void SetUp() override {
    saved_ = active_cpu_path();
    if (!set_cpu_path(path())) GTEST_SKIP() << "this CPU cannot run " << cpu_path_name(path());
  }
  void TearDown() override { set_cpu_path(saved_); }
  MatmulCase param() const { return std::get<0>(GetParam()); }
  CpuPath path() const { return std::get<1>(GetParam()); }

 private:
  CpuPath saved_ = CpuPath::kScalar;
};

// Shapes: odd and even row counts; cols the smallest legal width and wider.
std::vector<std::pair<int64_t, int64_t>> shapes_for(DType t) {
  const int64_t bs = dtype_info(t).block_size;
  const int64_t c0 = bs == 1 ? 37 : bs;        // 37: not a multiple of 8 (tail path)
  const int64_t c1 = bs == 1 ? 200 : 4 * std::max<int64_t>(bs, 64);
  // 269 rows: with up to 2 threads the row chunks hold 16 rows, so the
  // AVX-512 kernels' two-strip (16-row) tiles run, beside 8-row tails.
  return {{1, c0}, {37, c1}, {172, c0 * 3}, {64, c1}, {269, c0 * 2}};
}

TEST_P(MatmulTest, MatchesReferenceAndExactDot) {
  const MatmulCase c = param();
  for (const auto& [rows, cols] : shapes_for(c.dtype)) {
    // One weight matrix a shape (quantizing it is most of this test's time
    // under the sanitizers); new activations for every token count.
    const Problem weights = make_problem(c.dtype, rows, cols, 1, static_cast<uint32_t>(rows * 31 + cols));
    for (int64_t num_tokens = 1; num_tokens <= 17; ++num_tokens) {
      SCOPED_TRACE(testing::Message() << dtype_name(c.dtype) << " rows=" << rows << " cols=" << cols
                                      << " T=" << num_tokens);
      const Problem p = with_tokens(c.dtype, weights, num_tokens, static_cast<uint32_t>(rows * 31 + cols + num_tokens + 1));
      const WeightMatrix w = p.matrix(c.dtype);
      std::vector<float> y(static_cast<size_t>(num_tokens * rows), NAN);
      std::vector<float> y_ref(y.size(), NAN);
      matmul(w, p.x.data(), num_tokens, y.data());
      matmul_reference(w, p.x.data(), num_tokens, y_ref.data());
      // The packed copy and the scalar twins compute the same bits.
      std::vector<float> y_packed(y.size(), NAN);
      std::vector<float> y_scalar(y.size(), NAN);
      const WeightMatrix packed = pack_for_matmul(w);
      matmul(packed, p.x.data(), num_tokens, y_packed.data());
      cpu::matmul_with(CpuPath::kScalar, w, p.x.data(), num_tokens, y_scalar.data());
      ASSERT_EQ(y_packed, y);
      ASSERT_EQ(y_scalar, y);
      // A matrix packed for this path serves every other SIMD path too.
      for (CpuPath other : supported_cpu_paths()) {
        std::vector<float> y_other(y.size(), NAN);
        cpu::matmul_with(other, packed, p.x.data(), num_tokens, y_other.data());
        ASSERT_EQ(y_other, y) << cpu_path_name(other);
      }
      for (int64_t t = 0; t < num_tokens; ++t) {
        for (int64_t r = 0; r < rows; ++r) {
          // The oracle from dequantized values (a path that shares no code with the
          // kernels): the dot product of what the integer kernels multiply.
          double exact = 0.0;
          double mag = 0.0;
          for (int64_t i = 0; i < cols; ++i) {
            exact += static_cast<double>(p.w_f32[r * cols + i]) * p.x_act[t * cols + i];
            mag += std::fabs(static_cast<double>(p.w_f32[r * cols + i]) * p.x_act[t * cols + i]);
          }
          const size_t k = static_cast<size_t>(t * rows + r);
          ASSERT_TRUE(std::isfinite(y[k])) << "t=" << t << " r=" << r;
          ASSERT_NEAR(y[k], y_ref[k], c.rel_tol * mag) << "t=" << t << " r=" << r;
          ASSERT_NEAR(y_ref[k], exact, 1e-6 * mag) << "t=" << t << " r=" << r;
        }
      }
    }
  }
}

// Activation quantization error is bounded by the quantization step: the
// result stays close to the product with unquantized activations.
TEST_P(MatmulTest, CloseToUnquantizedActivations) {
  const MatmulCase c = param();
  const int64_t rows = 29;
  const int64_t cols = 512;
  const int64_t num_tokens = 3;
  const Problem p = make_problem(c.dtype, rows, cols, num_tokens, 99);
  std::vector<float> y(static_cast<size_t>(num_tokens * rows));
  matmul(p.matrix(c.dtype), p.x.data(), num_tokens, y.data());
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t r = 0; r < rows; ++r) {
      double exact = 0.0;
      double mag = 0.0;
      double bound = 0.0;  // sum |w_i| |x_i - x_act_i|: the most activation rounding can move y
      for (int64_t i = 0; i < cols; ++i) {
        const double wi = p.w_f32[r * cols + i];
        exact += wi * p.x[t * cols + i];
        mag += std::fabs(wi * p.x[t * cols + i]);
        bound += std::fabs(wi) * std::fabs(p.x[t * cols + i] - p.x_act[t * cols + i]);
      }
      EXPECT_NEAR(y[t * rows + r], exact, bound + 1e-6 * mag);
    }
  }
}

// Rows are split over threads, tokens chunked; results may not depend on either.
TEST_P(MatmulTest, SameResultForAnyThreadCount) {
  const MatmulCase c = param();
  const int64_t rows = 301;
  const int64_t cols = dtype_info(c.dtype).block_size == 1 ? 4096 : 1024;
  const int64_t num_tokens = 19;
  const Problem p = make_problem(c.dtype, rows, cols, num_tokens, 5);
  const int saved = num_threads();
  std::vector<float> y1(static_cast<size_t>(num_tokens * rows));
  std::vector<float> y3(y1.size());
  std::vector<float> y3_packed(y1.size());
  const WeightMatrix packed = pack_for_matmul(p.matrix(c.dtype));
  set_num_threads(1);
  matmul(p.matrix(c.dtype), p.x.data(), num_tokens, y1.data());
  set_num_threads(3);
  matmul(p.matrix(c.dtype), p.x.data(), num_tokens, y3.data());
  matmul(packed, p.x.data(), num_tokens, y3_packed.data());
  set_num_threads(saved);
  EXPECT_EQ(y1, y3);
  EXPECT_EQ(y1, y3_packed);
  // One token at a time gives the same rows as the batch (batching changes nothing).
  std::vector<float> y_one(static_cast<size_t>(rows));
  for (int64_t t : {0, 7, 18}) {
    matmul(p.matrix(c.dtype), p.x.data() + t * cols, 1, y_one.data());
    for (int64_t r = 0; r < rows; ++r) ASSERT_EQ(y_one[r], y1[t * rows + r]) << "t=" << t << " r=" << r;
  }
}

// Batch invariance where the kernels could break it: a token's outputs may not
// depend on the tile it lands in (first, middle, a partial last tile), on the
// tokens beside it, or on the rows beside its row (a partial last strip).
TEST_P(MatmulTest, EveryTokenEqualsItsSingleTokenResult) {
  const MatmulCase c = param();
  const int64_t rows = 45;  // five strips of 8 rows and a partial one
  const int64_t cols = dtype_info(c.dtype).block_size == 1 ? 300 : 512;
  const int64_t max_tokens = 41;
  const Problem p = make_problem(c.dtype, rows, cols, max_tokens, 77);
  for (const bool packed : {false, true}) {
    const WeightMatrix w = packed ? pack_for_matmul(p.matrix(c.dtype)) : p.matrix(c.dtype);
    std::vector<float> single(static_cast<size_t>(max_tokens * rows));  // [max_tokens, rows]
    for (int64_t t = 0; t < max_tokens; ++t) matmul(w, p.x.data() + t * cols, 1, single.data() + t * rows);
    for (int64_t num_tokens : {2, 3, 4, 5, 6, 7, 9, 12, 16, 17, 41}) {
      // Tokens in reverse order from an offset, so each sits in another tile than alone.
      std::vector<float> x(static_cast<size_t>(num_tokens * cols));
      std::vector<int64_t> src(static_cast<size_t>(num_tokens));
      for (int64_t t = 0; t < num_tokens; ++t) {
        src[t] = ((max_tokens - 1 - t * 3) % max_tokens + max_tokens) % max_tokens;
        std::copy_n(p.x.data() + src[t] * cols, cols, x.data() + t * cols);
      }
      std::vector<float> y(static_cast<size_t>(num_tokens * rows));
      matmul(w, x.data(), num_tokens, y.data());
      for (int64_t t = 0; t < num_tokens; ++t)
        for (int64_t r = 0; r < rows; ++r)
          ASSERT_EQ(y[t * rows + r], single[src[t] * rows + r])
              << "packed=" << packed << " T=" << num_tokens << " t=" << t << " r=" << r;
    }
  }
}

// Wide rows: a call's tokens span several token blocks (matmul.cpp keeps
// about 1 MiB of whole activation rows per block, here 16 to 48 tokens; 8 MiB
// of f32 rows for float weights, 128 tokens), the float kernels make 8 to 64
// column passes (2,048 to 256 columns each), and the results must be those of
// one token at a time and of the scalar path.
TEST_P(MatmulTest, TokenBlocksChangeNothing) {
  const MatmulCase c = param();
  const int64_t rows = 24;
  const int64_t cols = 16384;
  const int64_t num_tokens = act_type_for(c.dtype) == DType::kF32 ? 150 : 70;
  const Problem p = make_problem(c.dtype, rows, cols, num_tokens, 91);
  const WeightMatrix w = pack_for_matmul(p.matrix(c.dtype));
  std::vector<float> y(static_cast<size_t>(num_tokens * rows), NAN);
  matmul(w, p.x.data(), num_tokens, y.data());
  std::vector<float> y_scalar(y.size(), NAN);
  cpu::matmul_with(CpuPath::kScalar, p.matrix(c.dtype), p.x.data(), num_tokens, y_scalar.data());
  ASSERT_EQ(y, y_scalar);
  std::vector<float> one(static_cast<size_t>(rows));
  for (int64_t t = 0; t < num_tokens; ++t) {
    matmul(w, p.x.data() + t * cols, 1, one.data());
    for (int64_t r = 0; r < rows; ++r) ASSERT_EQ(y[t * rows + r], one[r]) << "t=" << t << " r=" << r;
  }
}

// matmul_many gives each matrix exactly what matmul gives it: matrices that
// share the input's form in one call (rows of all of them in one fork), and
// mixed forms or more than four matrices one at a time.
TEST_P(MatmulTest, ManyMatricesEqualOneAtATime) {
  const MatmulCase c = param();
  const int64_t cols = 4 * std::max<int64_t>(dtype_info(c.dtype).block_size, 64);
  const DType other_form = act_type_for(c.dtype) == DType::kF32 ? DType::kQ8_0 : DType::kF16;
  const std::vector<std::pair<DType, int64_t>> shapes = {
      {c.dtype, 37}, {c.dtype, 64}, {c.dtype, 24}, {other_form, 40}, {c.dtype, 8}};
  std::vector<Problem> problems;
  std::vector<WeightMatrix> ws;
  for (size_t i = 0; i < shapes.size(); ++i) {
    problems.push_back(make_problem(shapes[i].first, shapes[i].second, cols, 13, static_cast<uint32_t>(50 + i)));
    ws.push_back(pack_for_matmul(problems.back().matrix(shapes[i].first)));
  }
  const std::vector<float>& x = problems[0].x;
  for (const std::vector<size_t>& pick :
       {std::vector<size_t>{0}, {0, 1, 2}, {1, 4}, {0, 3}, {0, 1, 2, 4}, {0, 1, 2, 4, 1}}) {
    for (int64_t num_tokens : {1, 5, 13}) {
      std::vector<std::vector<float>> ys;
      std::vector<MatmulJob> jobs;
      for (size_t i : pick) ys.emplace_back(static_cast<size_t>(num_tokens * ws[i].rows), NAN);
      for (size_t k = 0; k < pick.size(); ++k) jobs.push_back({&ws[pick[k]], ys[k].data()});
      matmul_many(jobs, x.data(), num_tokens);
      for (size_t k = 0; k < pick.size(); ++k) {
        std::vector<float> one(ys[k].size(), NAN);
        matmul(ws[pick[k]], x.data(), num_tokens, one.data());
        ASSERT_EQ(ys[k], one) << "matrix " << pick[k] << " of " << pick.size() << ", T=" << num_tokens;
      }
    }
  }
}

// matmul_grouped gives each job exactly what matmul gives it: matrices of
// different shapes and inputs of different token counts (LoRA's A [rank, in]
// and B [out, rank] of several adapters) in one fork, enough work to fork
// and too little; quantized-input matrices one at a time.
TEST_P(MatmulTest, GroupedMatmulsEqualOneAtATime) {
  const MatmulCase c = param();
  const int64_t unit = std::max<int64_t>(dtype_info(c.dtype).block_size, 32);
  struct Shape {
    int64_t rows, cols, num_tokens;
  };
  // Together past the work a fork needs; the first alone under it.
  const std::vector<Shape> shapes = {
      {16, 8 * unit, 1}, {1024, 2 * unit, 3}, {8, 4 * unit, 0}, {300, unit, 9}, {4, unit, 1}};
  for (size_t num_jobs : {size_t{1}, size_t{2}, shapes.size()}) {
    std::vector<Problem> problems;
    std::vector<WeightMatrix> ws;
    for (size_t i = 0; i < num_jobs; ++i) {
      const Shape& sh = shapes[i];
      problems.push_back(make_problem(c.dtype, sh.rows, sh.cols, sh.num_tokens, static_cast<uint32_t>(70 + i)));
      ws.push_back(pack_for_matmul(problems.back().matrix(c.dtype)));
    }
    std::vector<std::vector<float>> ys(num_jobs);
    std::vector<GroupedMatmulJob> jobs;
    for (size_t i = 0; i < num_jobs; ++i) {
      ys[i].assign(static_cast<size_t>(shapes[i].num_tokens * shapes[i].rows), NAN);
      jobs.push_back({&ws[i], problems[i].x.data(), shapes[i].num_tokens, ys[i].data()});
    }
    matmul_grouped(jobs);
    for (size_t i = 0; i < num_jobs; ++i) {
      std::vector<float> one(ys[i].size(), NAN);
      matmul(ws[i], problems[i].x.data(), shapes[i].num_tokens, one.data());
      ASSERT_EQ(ys[i], one) << "job " << i << " of " << num_jobs;
    }
  }
}

TEST_P(MatmulTest, GetRowEqualsDequantizedRow) {
  const MatmulCase c = param();
  const int64_t cols = 2 * std::max<int64_t>(dtype_info(c.dtype).block_size, 32);
  const Problem p = make_problem(c.dtype, 5, cols, 1, 17);
  const WeightMatrix packed = pack_for_matmul(p.matrix(c.dtype));  // get_row reads the GGUF layout still
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < 5; ++r) {
    get_row(p.matrix(c.dtype), r, row.data());
    for (int64_t i = 0; i < cols; ++i) ASSERT_EQ(row[i], p.w_f32[r * cols + i]);
    get_row(packed, r, row.data());
    for (int64_t i = 0; i < cols; ++i) ASSERT_EQ(row[i], p.w_f32[r * cols + i]);
  }
}

// The fast activation quantizers inside matmul equal quantize_row bit for bit,
// including ties: Q8_0 rounds half away from zero (roundf), Q8_K half to even.
TEST(MatmulActivations, QuantizersMatchQuantizeRow) {
  const int64_t cols = 1024;
  auto x = test::random_floats(cols, 23, 2.f);
  // Block 0: amax 127 makes the Q8_0 scale exactly 1, so these are exact ties.
  x[0] = 127.f;
  x[1] = 2.5f;
  x[2] = -3.5f;
  x[3] = 0.5f;
  // Super-block 1: max -127 makes the Q8_K iscale exactly 1.
  x[256] = -127.f;
  x[257] = 2.5f;
  x[258] = -3.5f;
  x[259] = -0.5f;
  for (int64_t i = 512; i < 544; ++i) x[i] = 0.f;  // an all-zero Q8_0 block
  // Scales at the edges of their fp16 rounding: a subnormal fp16 (the quants
  // still use the unrounded scale), one past fp16's range (d is inf), and
  // two exact ties between fp16 neighbours (1 + 2^-11 rounds down to even,
  // 1 + 3 * 2^-11 up).
  const float amax_of_scale[] = {5e-4f, 1e7f, 127.f * (1.f + 0x1p-11f), 127.f * (1.f + 3 * 0x1p-11f)};
  for (int k = 0; k < 4; ++k) {
    for (int j = 0; j < 32; ++j) x[576 + 32 * k + j] = amax_of_scale[k] * static_cast<float>(j - 15) / 17.f;
    x[576 + 32 * k + 7] = -amax_of_scale[k];
  }

  std::vector<BlockQ8_0> ref0(cols / 32);
  quantize_row(DType::kQ8_0, x.data(), ref0.data(), cols);
  std::vector<int8_t> qs(cols);
  std::vector<float> d(cols / 32);
  std::vector<int32_t> sums(cols / 32);
  // The block-major copy, as in a call of 3 tokens where this is token 1.
  constexpr int64_t kTokens = 3;
  std::vector<cpu::ActBlockQ8Tile> tiles(cols / 32 * kTokens);
  const cpu::CpuKernels& kernels = cpu::kernels_for(active_cpu_path());
  kernels.act_q8_0(x.data(), cols, {qs.data(), d.data(), sums.data(), tiles.data() + 1, kTokens});
  for (int64_t b = 0; b < cols / 32; ++b) {
    ASSERT_EQ(d[b], fp16_to_f32(ref0[b].d)) << b;
    int32_t sum = 0;
    for (int j = 0; j < 32; ++j) {
      ASSERT_EQ(qs[b * 32 + j], ref0[b].qs[j]) << b << " " << j;
      sum += ref0[b].qs[j];
    }
    ASSERT_EQ(sums[b], sum) << b;
    const cpu::ActBlockQ8Tile& tile = tiles[b * kTokens + 1];
    ASSERT_EQ(std::memcmp(tile.qs, ref0[b].qs, 32), 0) << b;
    ASSERT_EQ(tile.d, d[b]) << b;
    ASSERT_EQ(tile.offset_q4_0, cpu::kFloatBiasValue + static_cast<float>(8 * sum)) << b;
    ASSERT_EQ(tile.offset_q8_0, cpu::kFloatBiasValue + static_cast<float>(128 * sum)) << b;
  }
  EXPECT_EQ(qs[1], 3);
  EXPECT_EQ(qs[2], -4);
  EXPECT_EQ(qs[3], 1);
  EXPECT_GT(d[18], 0.f);
  EXPECT_LT(d[18], 0x1p-14f);  // subnormal in fp16
  EXPECT_TRUE(std::isinf(d[19]));
  EXPECT_EQ(d[20], 1.f);
  EXPECT_EQ(d[21], 1.f + 0x1p-9f);

  std::vector<BlockQ8_K> refk(cols / 256);
  quantize_row(DType::kQ8_K, x.data(), refk.data(), cols);
  std::vector<cpu::ActBlockQ8K> actk(cols / 256);
  cpu::kernels_for(active_cpu_path()).act_q8_k(x.data(), cols, actk.data());
  for (int64_t b = 0; b < cols / 256; ++b) {
    ASSERT_EQ(actk[b].d, refk[b].d) << b;
    for (int j = 0; j < 256; ++j) ASSERT_EQ(actk[b].qs[j], refk[b].qs[j]) << b << " " << j;
    for (int g = 0; g < 16; ++g) ASSERT_EQ(actk[b].bsums[g], refk[b].bsums[g]);
    for (int j = 0; j < 8; ++j) ASSERT_EQ(actk[b].bsum_pairs[j], refk[b].bsums[2 * j] + refk[b].bsums[2 * j + 1]);
  }
  EXPECT_EQ(actk[1].qs[1], 2);
  EXPECT_EQ(actk[1].qs[2], -4);
  EXPECT_EQ(actk[1].qs[3], 0);
}

// The forced path is refused where the CPU lacks it, and the scalar path is always there.
TEST(CpuPathTest, UnsupportedPathsAreRefused) {
  const CpuPath saved = active_cpu_path();
  EXPECT_TRUE(cpu_path_supported(CpuPath::kScalar));
  EXPECT_EQ(supported_cpu_paths().front(), CpuPath::kScalar);
  for (CpuPath p : {CpuPath::kScalar, CpuPath::kAvx2, CpuPath::kAvxVnni, CpuPath::kAvx512}) {
    EXPECT_EQ(set_cpu_path(p), cpu_path_supported(p)) << cpu_path_name(p);
    EXPECT_EQ(parse_cpu_path(cpu_path_name(p)), p);
  }
  EXPECT_FALSE(parse_cpu_path("avx1024").has_value());
  set_cpu_path(saved);
}

INSTANTIATE_TEST_SUITE_P(
    AllDtypes, MatmulTest,
    ::testing::Combine(::testing::Values(MatmulCase{DType::kF32, 1e-6}, MatmulCase{DType::kF16, 1e-6},
                                         MatmulCase{DType::kBF16, 1e-6}, MatmulCase{DType::kQ8_0, 1e-6},
                                         MatmulCase{DType::kQ4_0, 1e-6}, MatmulCase{DType::kQ4_K, 1e-6},
                                         MatmulCase{DType::kQ6_K, 1e-6}),
                       ::testing::Values(CpuPath::kScalar, CpuPath::kAvx2, CpuPath::kAvxVnni, CpuPath::kAvx512)),
    [](const auto& info) {
      return std::string(dtype_name(std::get<0>(info.param).dtype)) + "_" + cpu_path_name(std::get<1>(info.param));
    });

}  // namespace
}  // namespace kvlm
