// `kvlm make-model`'s presets hold the published shapes: each plans exactly
// the parameter count its model card gives (with the model's own vocabulary
// size), and llama3 RoPE factors come out as the converter computes them.
#include <gtest/gtest.h>

#include <cmath>

#include "model/make_model.h"
#include "model/make_model_plan.h"

namespace kvlm {
namespace {

int64_t planned_params(ModelShape s, int32_t vocab) {
  s.vocab_size = vocab;
  check_shape(s);
  int64_t n = 0;
  // RoPE factor tensors are derived constants, not parameters of the model card.
  for (const TensorPlan& t : plan_tensors(s, vocab, DType::kQ4_0))
    if (t.fill != Fill::kValues) n += t.cols * t.total_rows();
  return n;
}

TEST(MakeModelPresets, PlanThePublishedParameterCounts) {
  struct Case {
    const char* preset;
    int32_t vocab;
    int64_t params;  // the model card's (safetensors) count
  };
  const Case cases[] = {
      {"tinyllama-1.1b", 32000, 1100048384},      {"llama-3-8b", 128256, 8030261248},
      {"llama-3.1-8b", 128256, 8030261248},       {"mistral-7b", 32768, 7248023552},
      {"qwen2.5-7b", 152064, 7615616512},         {"mixtral-8x7b", 32000, 46702792704},
      {"qwen1.5-moe-a2.7b", 151936, 14315784192}, {"qwen3-0.6b", 151936, 596049920},
      {"qwen3-8b", 151936, 8190735360},           {"qwen3-30b-a3b", 151936, 30532122624},
      {"phi-3-mini-4k", 32064, 3821079552},
  };
  for (const Case& c : cases) {
    auto s = model_preset(c.preset);
    ASSERT_TRUE(s.has_value()) << c.preset;
    EXPECT_EQ(planned_params(*s, c.vocab), c.params) << c.preset;
  }
  const ModelShape mixtral = *model_preset("mixtral-8x7b");
  EXPECT_EQ(mixtral.num_experts, 8);
  EXPECT_EQ(mixtral.num_experts_used, 2);
}

TEST(MakeModelPresets, EveryPresetIsAValidShape) {
  for (const std::string& name : model_preset_names()) {
    SCOPED_TRACE(name);
    auto s = model_preset(name);
    ASSERT_TRUE(s.has_value());
    EXPECT_NO_THROW(planned_params(*s, 32000));
  }
}

// Llama 3.1's rope_freqs (factor 8, low 1, high 4, original 8192, base
// 500000, head 128): 1 for the fast pairs, 8 for the slow ones, and the
// converter's smooth blend between.
TEST(MakeModelPresets, Llama3RopeFactorsFollowTheConverter) {
  auto s = model_preset("llama-3.1-8b");
  ASSERT_TRUE(s.has_value());
  const std::vector<float> f = llama3_rope_factors(*s);
  ASSERT_EQ(f.size(), 64u);
  int ones = 0, eights = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    const double wavelen = 2 * M_PI * std::pow(500000.0, 2.0 * static_cast<double>(i) / 128);
    if (wavelen < 8192.0 / 4) {
      EXPECT_EQ(f[i], 1.0f) << i;
      ++ones;
    } else if (wavelen > 8192.0) {
      EXPECT_EQ(f[i], 8.0f) << i;
      ++eights;
    } else {
      const double smooth = (8192.0 / wavelen - 1.0) / 3.0;
      EXPECT_NEAR(f[i], 1.0 / ((1 - smooth) / 8 + smooth), 1e-4) << i;
    }
    if (i > 0) { EXPECT_GE(f[i], f[i - 1]) << i; }
  }
  EXPECT_GT(ones, 20);
  EXPECT_GT(eights, 20);
}

}  // namespace
}  // namespace kvlm
