// `kvlm make-lora` and `kvlm convert --merge-lora`: a seed fixes the bytes,
// a merged model runs and its logits move with the adapter (not at scale
// 0), and bad flags are one-line errors.
#include <gtest/gtest.h>

#include "model/gguf.h"
#include "support/test_support.h"

namespace kvlm::lora_cli_test {

std::string tiny() { return test::shared_path("models/synth-tiny-F32.gguf"); }

std::vector<std::string> make_lora_args(const std::string& out, const std::string& format, const std::string& seed) {
  return {"make-lora", "-m", tiny(), "-o", out, "--format", format, "--rank", "8", "--alpha", "16",
          "--targets", "all", "--seed", seed, "--scale-init", "0.2"};
}

std::string logits(const std::string& model) {
  const auto r = test::run_kvlm({"logits", "-m", model, "--tokens", "1,403,407"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.out;
}

TEST(LoraCli, MakeLoraSameSeedSameBytes) {
  const std::string dir = test::temp_dir();
  for (const std::string format : {"gguf", "peft"}) {
    SCOPED_TRACE(format);
    const std::string ext = format == "gguf" ? ".gguf" : "";
    auto r = test::run_kvlm(make_lora_args(dir + "/l1" + ext, format, "1"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("make-lora: wrote"), std::string::npos) << r.err;
    ASSERT_EQ(test::run_kvlm(make_lora_args(dir + "/l1b" + ext, format, "1")).exit_code, 0);
    ASSERT_EQ(test::run_kvlm(make_lora_args(dir + "/l2" + ext, format, "2")).exit_code, 0);
    const std::string file = format == "gguf" ? "" : "/adapter_model.safetensors";
    const std::string a = test::read_file(dir + "/l1" + ext + file);
    EXPECT_TRUE(a == test::read_file(dir + "/l1b" + ext + file));
    EXPECT_FALSE(a == test::read_file(dir + "/l2" + ext + file));
  }
}

TEST(LoraCli, MergedModelRunsAndMovesTheLogits) {
  const std::string dir = test::temp_dir();
  ASSERT_EQ(test::run_kvlm(make_lora_args(dir + "/m.gguf", "gguf", "5")).exit_code, 0);
  ASSERT_EQ(test::run_kvlm(make_lora_args(dir + "/m-peft", "peft", "5")).exit_code, 0);
  auto r = test::run_kvlm({"convert", tiny(), "-o", dir + "/merged.gguf", "--merge-lora", dir + "/m.gguf"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = test::run_kvlm({"convert", tiny(), "-o", dir + "/merged-peft.gguf", "--merge-lora", dir + "/m-peft:1.0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = test::run_kvlm({"convert", tiny(), "-o", dir + "/merged-0.gguf", "--merge-lora", dir + "/m.gguf:0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string base = logits(tiny()), merged = logits(dir + "/merged.gguf");
  EXPECT_NE(merged, base) << "the adapter changed nothing";
  EXPECT_EQ(logits(dir + "/merged-0.gguf"), base) << "scale 0 must leave the model as it was";
  // The same pairs in both formats merge to the same model.
  EXPECT_EQ(logits(dir + "/merged-peft.gguf"), merged);
  EXPECT_EQ(GgufFile::open(dir + "/merged.gguf")->require_tensor("blk.0.attn_q.weight").dtype, DType::kF32);
}

TEST(LoraCli, BadFlagsAreOneLineErrors) {
  const std::string dir = test::temp_dir();
  auto r = test::run_kvlm({"make-lora", "-m", tiny(), "-o", dir + "/x", "--targets", "token_embd"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("'token_embd' is not a target"), std::string::npos) << r.err;
  r = test::run_kvlm({"make-lora", "-m", tiny(), "-o", dir + "/x", "--format", "onnx"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--format 'onnx'"), std::string::npos) << r.err;
  r = test::run_kvlm({"convert", tiny(), "-o", dir + "/y.gguf", "--merge-lora", dir + "/no-such-adapter"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("no such LoRA adapter"), std::string::npos) << r.err;
}

}  // namespace kvlm::lora_cli_test
