// Our quantizers against llama.cpp's: the synth-tiny files hold the same
// random weights in F32 and in each type (quantized by llama.cpp's quantizer
// from the F32 file), so quantize_row on the F32 tensor must reproduce the
// file's bytes, and dequantize_row of the file must land near the F32 values.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/quant.h"
#include "model/gguf.h"
#include "ops/ops_test_util.h"
#include "support/test_support.h"

namespace kvlm {
namespace {

struct GgufCase {
  DType dtype;
  double max_nrmse;  // dequantized file vs F32 file
};

std::unique_ptr<GgufFile> open_model(std::string_view type) {
  return GgufFile::open(test::shared_path("models/synth-tiny-" + std::string(type) + ".gguf"));
}

class QuantMatchesLlamaCpp : public ::testing::TestWithParam<GgufCase> {
 protected:
  static void SetUpTestSuite() { f32_ = open_model("F32").release(); }
  static void TearDownTestSuite() {
    delete f32_;
    f32_ = nullptr;
  }
  static GgufFile* f32_;
};
GgufFile* QuantMatchesLlamaCpp::f32_ = nullptr;

// Every 2-D weight of the model, among them blk.0.attn_q (256x256) and the
// 768-wide blk.*.ffn_down.
std::vector<std::string> matrix_names(const GgufFile& f) {
  std::vector<std::string> names;
  for (const auto& t : f.tensors())
    if (t.dims.size() == 2) names.push_back(t.name);
  return names;
}

TEST_P(QuantMatchesLlamaCpp, QuantizeReproducesFileBytes) {
  const GgufCase c = GetParam();
  const auto qfile = open_model(dtype_name(c.dtype));
  const auto names = matrix_names(*f32_);
  ASSERT_GE(names.size(), 30u);
  bool saw_ffn_down = false;
  for (const auto& name : names) {
    const GgufTensor& src = f32_->require_tensor(name);
    const GgufTensor& ref = qfile->require_tensor(name);
    ASSERT_EQ(src.dtype, DType::kF32);
    ASSERT_EQ(ref.dtype, c.dtype) << name;
    ASSERT_EQ(src.dims, ref.dims) << name;
    const int64_t cols = src.dims[0];
    const int64_t rows = src.num_elements() / cols;
    saw_ffn_down |= cols == 768;
    std::vector<float> x(static_cast<size_t>(rows * cols));
    std::memcpy(x.data(), src.data, x.size() * sizeof(float));
    const auto mine = test::quantize_matrix(c.dtype, x, rows, cols);
    ASSERT_EQ(mine.size(), ref.num_bytes) << name;
    // Count differing blocks so a failure says how far off we are.
    const size_t block_bytes = static_cast<size_t>(dtype_info(c.dtype).block_bytes);
    size_t num_diff = 0;
    size_t first_diff = 0;
    for (size_t b = 0; b < mine.size() / block_bytes; ++b) {
      if (std::memcmp(mine.data() + b * block_bytes, ref.data + b * block_bytes, block_bytes) != 0) {
        if (num_diff++ == 0) first_diff = b;
      }
    }
    EXPECT_EQ(num_diff, 0u) << name << ": " << num_diff << " of " << mine.size() / block_bytes
                            << " blocks differ, first at block " << first_diff;
  }
  EXPECT_TRUE(saw_ffn_down);
}

TEST_P(QuantMatchesLlamaCpp, DequantizedFileIsCloseToF32) {
  const GgufCase c = GetParam();
  const auto qfile = open_model(dtype_name(c.dtype));
  for (const char* name : {"blk.0.attn_q.weight", "blk.0.ffn_down.weight", "output.weight"}) {
    const GgufTensor& src = f32_->require_tensor(name);
    const GgufTensor& q = qfile->require_tensor(name);
    const int64_t cols = src.dims[0];
    const int64_t rows = src.num_elements() / cols;
    std::vector<float> x(static_cast<size_t>(rows * cols));
    std::memcpy(x.data(), src.data, x.size() * sizeof(float));
    const auto back = test::dequantize_matrix(c.dtype, q.data, rows, cols);
    const double err = test::normalized_rmse(back, x);
    EXPECT_LT(err, c.max_nrmse) << name;
    EXPECT_GT(err, c.max_nrmse / 10) << name << ": suspiciously exact for " << dtype_name(c.dtype);
  }
}

// matmul straight on the file's bytes (llama.cpp's layout) tracks the F32
// product about as closely as the weights themselves track the F32 weights.
TEST_P(QuantMatchesLlamaCpp, MatmulOnFileWeightsTracksF32) {
  const GgufCase c = GetParam();
  const auto qfile = open_model(dtype_name(c.dtype));
  for (const char* name : {"blk.1.ffn_gate.weight", "blk.2.ffn_down.weight"}) {
    const GgufTensor& src = f32_->require_tensor(name);
    const GgufTensor& q = qfile->require_tensor(name);
    const int64_t cols = src.dims[0];
    const int64_t rows = src.num_elements() / cols;
    const int64_t num_tokens = 6;
    const auto x = test::random_floats(static_cast<size_t>(num_tokens * cols), 21);
    std::vector<float> y32(static_cast<size_t>(num_tokens * rows));
    std::vector<float> yq(y32.size());
    matmul({src.data, DType::kF32, rows, cols, nullptr}, x.data(), num_tokens, y32.data());
    matmul({q.data, c.dtype, rows, cols, nullptr}, x.data(), num_tokens, yq.data());
    const double err = test::normalized_rmse(yq, y32);
    EXPECT_LT(err, c.max_nrmse * 1.3) << name;
    EXPECT_GT(err, c.max_nrmse / 20) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(SynthTiny, QuantMatchesLlamaCpp,
                         // bounds ~20% above the measured errors (2.1e-4, 5.4e-3, 8.6e-2, 7.2e-2, 1.8e-2)
                         ::testing::Values(GgufCase{DType::kF16, 2.5e-4}, GgufCase{DType::kQ8_0, 6.5e-3},
                                           GgufCase{DType::kQ4_0, 0.1}, GgufCase{DType::kQ4_K, 0.085},
                                           GgufCase{DType::kQ6_K, 0.021}),
                         [](const auto& info) { return std::string(dtype_name(info.param.dtype)); });

}  // namespace
}  // namespace kvlm
