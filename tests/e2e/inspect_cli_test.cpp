// `kvlm inspect` names the architecture and what the loaders read; a model of
// an unsupported architecture is refused with its name and the supported list.
#include <gtest/gtest.h>

#include "model/gguf_writer.h"
#include "support/test_support.h"

namespace kvlm::inspect_cli_test {

TEST(InspectCli, NamesArchitectureAndLoaderSettings) {
  auto r = test::run_kvlm({"inspect", "-m", test::shared_path("models/synth-gemma2-F32.gguf")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("architecture: gemma2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sliding window: 8"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("soft-cap: attention 50 final 30"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rope: neox"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("blk.25.post_ffw_norm.weight"), std::string::npos);

  r = test::run_kvlm({"inspect", "-m", test::shared_path("models/synth-gpt2-F16.gguf")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("architecture: gpt2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(byte-level BPE), 50257 tokens, pre-tokenizer gpt-2"), std::string::npos) << r.out;

  r = test::run_kvlm({"inspect", "-m", test::shared_path("models/stories260K.gguf")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("rope: normal"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("layers: 5  heads: 8 (kv 4)"), std::string::npos) << r.out;
}

TEST(InspectCli, UnsupportedArchitectureIsRefusedByName) {
  GgufWriter w;
  w.set_string("general.architecture", "mamba");
  w.set_u32("mamba.block_count", 1);
  std::string path = test::temp_dir() + "/mamba.gguf";
  w.write(path);
  auto r = test::run_kvlm({"inspect", "-m", path});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("unsupported architecture 'mamba'"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("llama, mistral, qwen2, qwen2moe, qwen3, qwen3moe, phi3, gpt2, gemma2"), std::string::npos) << r.out;

  r = test::run_kvlm({"run", "-m", path, "-p", "hi"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("unsupported architecture 'mamba' (kvlm supports: llama, mistral, qwen2, qwen2moe, qwen3, qwen3moe, phi3, gpt2, gemma2)"),
            std::string::npos)
      << r.err;
}

TEST(Gpt2Cli, ContextPastTrainedLengthIsAClearError) {
  // synth-gpt2 learned 256 positions.
  std::string ids = "1";
  for (int i = 1; i < 300; ++i) ids += ",1";
  auto r = test::run_kvlm({"logits", "-m", test::shared_path("models/synth-gpt2-F16.gguf"), "--tokens", ids});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("exceed the 256 positions gpt2 was trained with"), std::string::npos) << r.err;
  r = test::run_kvlm({"run", "-m", test::shared_path("models/synth-gpt2-F16.gguf"), "-p", "Hello",
                      "--max-model-len", "512"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("exceeds the 256 positions gpt2 was trained with"), std::string::npos) << r.err;
}

}  // namespace kvlm::inspect_cli_test
