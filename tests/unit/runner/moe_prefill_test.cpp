// Mixture-of-experts forward passes batch their expert matmuls: a prefill
// groups its tokens by expert, so each expert's weights are read once per
// layer however many tokens chose it (the model's MoeStats counter), and the
// grouping changes no bit of any token's logits.
#include <gtest/gtest.h>

#include <numeric>

#include "model/make_model.h"
#include "model/model.h"
#include "runner/sequence_evaluator.h"
#include "support/test_support.h"

namespace kvlm {
namespace {

constexpr int32_t kExperts = 8, kUsed = 2, kLayers = 2;

// A tiny Mixtral (llama with experts) or Qwen2-MoE (a shared expert, no
// renormalisation), random weights sharp enough that routing varies.
std::string make_moe_model(const std::string& arch) {
  MakeModelOptions o;
  o.shape.arch = arch;
  o.shape.dim = 64;
  o.shape.num_layers = kLayers;
  o.shape.num_heads = 4;
  o.shape.num_kv_heads = 2;
  o.shape.ffn_dim = 64;
  o.shape.context_length = 1024;
  o.shape.num_experts = kExperts;
  o.shape.num_experts_used = kUsed;
  if (arch == "qwen2moe") {
    o.shape.expert_ffn_dim = 32;
    o.shape.shared_expert_ffn_dim = 64;
  }
  o.type = DType::kF32;
  o.weight_std = 0.3f;
  o.seed = 11;
  o.vocab_from = test::shared_path("models/stories260K.gguf");
  o.out_path = test::temp_dir() + "/moe-" + arch + ".gguf";
  make_model(o, [](const std::string&) {});
  return o.out_path;
}

std::vector<int32_t> some_tokens(int32_t n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) t[i] = 3 + (i * 37 + i / 7) % 500;
  t[0] = 1;
  return t;
}

class MoePrefill : public ::testing::TestWithParam<const char*> {};

TEST_P(MoePrefill, ReadsEachExpertOncePerLayer) {
  auto model = Model::load(make_moe_model(GetParam()));
  ASSERT_EQ(model->config().moe.num_experts, kExperts);
  const int32_t n = 512;
  SequenceEvaluator eval(*model, n + 8);
  eval.eval(some_tokens(n), /*all_logits=*/false);
  const MoeStats& s = eval.moe_stats();
  ASSERT_EQ(s.weight_reads.size(), static_cast<size_t>(kLayers * kExperts));
  for (int32_t l = 0; l < kLayers; ++l) {
    int32_t routed = 0;
    for (int32_t e = 0; e < kExperts; ++e) {
      const size_t i = static_cast<size_t>(l * kExperts + e);
      // With 512 tokens every expert is chosen, and still read just once.
      EXPECT_GT(s.tokens[i], 0) << "layer " << l << " expert " << e;
      EXPECT_EQ(s.weight_reads[i], 1) << "layer " << l << " expert " << e;
      routed += s.tokens[i];
    }
    EXPECT_EQ(routed, n * kUsed) << "layer " << l;
  }
  // A decode step reads only its token's k experts.
  const int32_t next = 77;
  eval.eval(std::span<const int32_t>(&next, 1), false);
  for (int32_t l = 0; l < kLayers; ++l) {
    auto first = eval.moe_stats().weight_reads.begin() + l * kExperts;
    EXPECT_EQ(std::accumulate(first, first + kExperts, 0), kUsed) << "layer " << l;
  }
}

// Grouping by expert is invisible in the result: the prefill's logits equal
// those of feeding the same tokens one at a time, bit for bit.
TEST_P(MoePrefill, GroupedLogitsEqualOneTokenAtATime) {
  auto model = Model::load(make_moe_model(GetParam()));
  const std::vector<int32_t> tokens = some_tokens(40);
  const size_t vocab = static_cast<size_t>(model->config().vocab_size);
  SequenceEvaluator batched(*model, 64);
  const std::vector<float> all = batched.eval(tokens, /*all_logits=*/true);
  SequenceEvaluator single(*model, 64);
  for (size_t t = 0; t < tokens.size(); ++t) {
    const std::vector<float>& row = single.eval(std::span<const int32_t>(&tokens[t], 1), false);
    ASSERT_EQ(row.size(), vocab);
    EXPECT_TRUE(std::equal(row.begin(), row.end(), all.begin() + static_cast<std::ptrdiff_t>(t * vocab)))
        << "position " << t;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, MoePrefill, ::testing::Values("llama", "qwen2moe"));

}  // namespace
}  // namespace kvlm
