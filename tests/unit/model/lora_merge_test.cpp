// merge_lora: each adapted matrix is W + scale * B A, computed here from the
// base and the adapter file; every other tensor keeps its bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "backend/backend.h"
#include "model/lora_load.h"
#include "model/lora_merge.h"
#include "model/make_lora.h"
#include "unit/model/lora_test_support.h"

namespace kvlm {
namespace {

struct MergeCase {
  const char* model;
  const char* targets;
  std::vector<std::string> adapted;  // GGUF target names of layer 0 that change
};

class LoraMerge : public ::testing::TestWithParam<MergeCase> {};

TEST_P(LoraMerge, AdaptedMatricesAreWPlusScaledBA) {
  const MergeCase& c = GetParam();
  MakeLoraOptions o;
  o.base_path = test::shared_path(c.model);
  o.out_path = test::temp_path(fmt::format("merge-{}.gguf", c.targets));
  o.format = LoraFormat::kGguf;
  o.rank = 4;
  o.alpha = 6;
  o.targets = c.targets;
  o.b_std = 0.5f;  // a delta far above F32 rounding
  make_lora(o);
  const test::LoraBase base = test::shared_lora_base(c.model);
  const auto adapter = load_lora(o.out_path, *base.file, base.config, default_backend(), 0.75f);
  const auto merged = merge_lora(GgufFile::open(o.base_path), *adapter);
  const auto lora = GgufFile::open(o.out_path);
  const float scale = 0.75f * 6 / 4;

  ASSERT_EQ(merged->tensors().size(), base.file->tensors().size());
  EXPECT_FALSE(merged->metadata().has("general.file_type"));
  int num_adapted = 0;
  for (const GgufTensor& w : base.file->tensors()) {
    const GgufTensor& m = merged->require_tensor(w.name);
    const GgufTensor* a = lora->find_tensor(w.name + ".lora_a");
    if (!a) {  // not adapted: the same bytes
      EXPECT_EQ(m.dtype, w.dtype) << w.name;
      ASSERT_EQ(m.num_bytes, w.num_bytes) << w.name;
      EXPECT_EQ(std::memcmp(m.data, w.data, w.num_bytes), 0) << w.name;
      continue;
    }
    ++num_adapted;
    const GgufTensor& b = lora->require_tensor(w.name + ".lora_b");
    ASSERT_EQ(m.dtype, DType::kF32) << w.name;
    const std::vector<float> wf = test::floats_of(w.dtype, w.data, w.num_elements());
    const std::vector<float> af = test::floats_of(a->dtype, a->data, a->num_elements());
    const std::vector<float> bf = test::floats_of(b.dtype, b.data, b.num_elements());
    const auto* mf = reinterpret_cast<const float*>(m.data);
    const int64_t in = w.dims[0], out = w.dims[1];
    double max_delta = 0;
    for (int64_t row = 0; row < out; row += 7) {
      for (int64_t col = 0; col < in; col += 5) {
        double delta = 0;
        for (int64_t k = 0; k < 4; ++k) delta += static_cast<double>(bf[row * 4 + k]) * af[k * in + col];
        const double want = wf[row * in + col] + scale * delta;
        EXPECT_NEAR(mf[row * in + col], want, 1e-5 + 1e-5 * std::fabs(want)) << w.name << " " << row << "," << col;
        max_delta = std::max(max_delta, std::fabs(scale * delta));
      }
    }
    EXPECT_GT(max_delta, 1e-3) << w.name << ": the adapter should change the matrix";
  }
  EXPECT_EQ(num_adapted, static_cast<int>(c.adapted.size()) * base.config.num_layers);
  for (const std::string& t : c.adapted) EXPECT_NE(lora->find_tensor("blk.0." + t + ".weight.lora_a"), nullptr);
}

INSTANTIATE_TEST_SUITE_P(Models, LoraMerge,
                         ::testing::Values(MergeCase{"models/synth-tiny-F32.gguf", "attn_q,ffn_down", {"attn_q", "ffn_down"}},
                                           MergeCase{"models/synth-gpt2-F16.gguf", "attn_qkv,ffn_up", {"attn_qkv", "ffn_up"}}),
                         [](const ::testing::TestParamInfo<MergeCase>& info) {
                           return info.param.model == std::string("models/synth-gpt2-F16.gguf") ? "gpt2" : "llama";
                         });

}  // namespace
}  // namespace kvlm
