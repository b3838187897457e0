// LoRA adapters through the CLI on real model files: adapters written by
// `kvlm make-lora` in both formats (PEFT folder, llama.cpp's GGUF LoRA), for
// attention only and for attention + MLP, give the logits of the model
// `kvlm convert --merge-lora` writes with the adapter merged into the base.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace kvlm::lora_logits_test {

using Json = nlohmann::json;

struct LoraCase {
  const char* base;     // under ../shared/models
  const char* format;   // peft or gguf
  const char* targets;  // attn or all
};

std::string case_name(const testing::TestParamInfo<LoraCase>& info) {
  std::string base = info.param.base;
  for (char& c : base)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return base + "_" + info.param.format + "_" + info.param.targets;
}

// Every logits row of `tokens`, fed in one batch.
std::vector<float> logits(const std::vector<std::string>& model_args, const std::string& tokens) {
  std::vector<std::string> args = {"logits", "--tokens", tokens, "--batched", "--kv-type", "f32", "-t", "1"};
  args.insert(args.end(), model_args.begin(), model_args.end());
  const test::CommandResult r = test::run_kvlm(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::vector<float> out;
  if (r.exit_code != 0) return out;
  const Json parsed = Json::parse(r.out);
  for (const Json& row : parsed["logits"])
    for (const Json& x : row) out.push_back(x.get<float>());
  return out;
}

// Normalised mean squared error of a against b.
double nmse(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return den > 0 ? num / den : num;
}

class LoraLogits : public testing::TestWithParam<LoraCase> {};

TEST_P(LoraLogits, AdapterLogitsEqualTheMergedModels) {
  const LoraCase& c = GetParam();
  const std::string base = test::shared_path(std::string("models/") + c.base);
  const std::string dir = test::temp_dir();
  const std::string adapter = dir + "/adapter" + (std::string(c.format) == "gguf" ? ".gguf" : "");
  const std::string merged = dir + "/merged.gguf";
  test::CommandResult r = test::run_kvlm({"make-lora", "-m", base, "-o", adapter, "--format", c.format, "--rank", "8",
                                          "--alpha", "16", "--targets", c.targets, "--seed", "5"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = test::run_kvlm({"convert", base, "-o", merged, "--merge-lora", adapter});
  ASSERT_EQ(r.exit_code, 0) << r.err;

  const std::string tokens = "1,15,300,42,7,99";
  const std::vector<float> with_merged = logits({"-m", merged}, tokens);
  const std::vector<float> base_alone = logits({"-m", base}, tokens);
  // Held as F32 the adapter is the merged model up to rounding; as F16 (the
  // default) its matrices are rounded to half precision, still within 1e-6.
  for (const char* type : {"f32", "f16"}) {
    const std::vector<float> with_adapter = logits({"-m", base, "--lora", adapter, "--lora-type", type}, tokens);
    ASSERT_FALSE(with_adapter.empty());
    EXPECT_LE(nmse(with_adapter, with_merged), 1e-6) << type << ": the adapter at run time differs from it merged";
  }
  // The adapter must matter, or the comparison above proves nothing.
  EXPECT_GT(nmse(base_alone, with_merged), 1e-4) << "the adapter barely changes the logits";
}

INSTANTIATE_TEST_SUITE_P(Formats, LoraLogits,
                         testing::Values(LoraCase{"synth-tiny-F32.gguf", "peft", "attn"},
                                         LoraCase{"synth-tiny-F32.gguf", "peft", "all"},
                                         LoraCase{"synth-tiny-F32.gguf", "gguf", "attn"},
                                         LoraCase{"synth-tiny-F32.gguf", "gguf", "all"},
                                         LoraCase{"synth-gpt2-F16.gguf", "peft", "all"},
                                         LoraCase{"synth-gpt2-F16.gguf", "gguf", "all"}),
                         case_name);

// Two adapters given to `kvlm run` apply together: the same greedy text as
// one adapter holding both (stacked), and not the text of either alone.
TEST(LoraRun, SeveralAdaptersApplyTogether) {
  const std::string base = test::shared_path("models/synth-tiny-F32.gguf");
  const std::string dir = test::temp_dir();
  for (const char* seed : {"1", "2"}) {
    const test::CommandResult r =
        test::run_kvlm({"make-lora", "-m", base, "-o", dir + "/a" + seed + ".gguf", "--format", "gguf", "--rank", "4",
                        "--targets", "all", "--seed", seed});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  auto run = [&](std::vector<std::string> loras) {
    std::vector<std::string> args = {"run", "-m", base, "-p", "Once upon a time", "-n", "24", "--temp", "0",
                                     "--ignore-eos", "-t", "1"};
    for (const std::string& l : loras) args.insert(args.end(), {"--lora", l});
    const test::CommandResult r = test::run_kvlm(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out;
  };
  const std::string both = run({dir + "/a1.gguf", dir + "/a2.gguf"});
  EXPECT_NE(both, run({dir + "/a1.gguf"}));
  EXPECT_NE(both, run({dir + "/a2.gguf"}));
  EXPECT_NE(both, run({}));
  // A scale of 0 is the base.
  EXPECT_EQ(run({dir + "/a1.gguf:0"}), run({}));
}

TEST(LoraRun, AnAdapterOfAnotherShapeIsRefusedNamingBoth) {
  const std::string dir = test::temp_dir();
  test::CommandResult r = test::run_kvlm({"make-lora", "-m", test::shared_path("models/synth-tiny-F32.gguf"), "-o",
                                          dir + "/tiny.gguf", "--format", "gguf", "--targets", "attn"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = test::run_kvlm({"run", "-m", test::shared_path("models/stories260K.gguf"), "-p", "Once", "-n", "4", "--lora",
                      dir + "/tiny.gguf"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("tiny.gguf"), std::string::npos) << r.err;
}

}  // namespace kvlm::lora_logits_test
