// `kvlm make-model`: every --type gives a file that inspect, run and logits
// accept; presets write their model's metadata; a seed fixes the bytes; bad
// flags are one-line errors.
#include <gtest/gtest.h>

#include "model/gguf.h"
#include "support/test_support.h"

namespace kvlm::make_model_cli_test {

std::string vocab() { return test::shared_path("vocab/ggml-vocab-llama-spm.gguf"); }

// dim 256 so the K-quants fit without fallback; 2 layers keep it fast.
std::vector<std::string> small_args(const std::string& type, const std::string& out) {
  return {"make-model", "--dim", "256", "--layers", "2", "--heads", "4", "--kv-heads", "2", "--ffn", "512",
          "--type", type, "--vocab-from", vocab(), "-o", out, "-t", "2"};
}

TEST(MakeModelCli, EveryTypeLoadsRunsAndScores) {
  for (const std::string type : {"Q4_0", "Q8_0", "Q4_K", "Q6_K", "F16", "F32", "BF16"}) {
    SCOPED_TRACE(type);
    const std::string path = test::temp_dir() + "/small-" + type + ".gguf";
    auto r = test::run_kvlm(small_args(type, path));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("make-model: wrote " + path), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("instead"), std::string::npos) << "no fallback expected: " << r.err;

    r = test::run_kvlm({"inspect", "-m", path});
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("vocab: 32000  dim: 256  layers: 2  heads: 4 (kv 2)  head_dim: 64  ffn: 512"),
              std::string::npos) << r.out;
    EXPECT_NE(r.out.find("SentencePiece"), std::string::npos) << r.out;
    auto f = GgufFile::open(path);
    EXPECT_EQ(dtype_name(f->require_tensor("blk.1.ffn_down.weight").dtype), type);
    EXPECT_EQ(dtype_name(f->require_tensor("token_embd.weight").dtype), type);
    EXPECT_EQ(f->require_tensor("blk.0.attn_norm.weight").dtype, DType::kF32);

    r = test::run_kvlm({"run", "-m", path, "-p", "Once upon a time", "-n", "4", "--temp", "0"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    r = test::run_kvlm({"logits", "-m", path, "--tokens", "1,403,407"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out.find("nan"), std::string::npos);
    EXPECT_NE(r.out.find("\"logits\":[["), std::string::npos);
  }
}

TEST(MakeModelCli, SameSeedSameBytesOtherSeedOtherBytes) {
  const std::string dir = test::temp_dir();
  auto args = [&](const std::string& out, const std::string& seed, const std::string& threads) {
    return std::vector<std::string>{"make-model", "--dim", "64", "--layers", "1", "--heads", "2", "--ffn", "96",
                                    "--type", "Q8_0", "--vocab-from", vocab(), "-o", out, "--seed", seed,
                                    "-t", threads};
  };
  ASSERT_EQ(test::run_kvlm(args(dir + "/s1a.gguf", "1", "1")).exit_code, 0);
  ASSERT_EQ(test::run_kvlm(args(dir + "/s1b.gguf", "1", "2")).exit_code, 0);
  ASSERT_EQ(test::run_kvlm(args(dir + "/s2.gguf", "2", "2")).exit_code, 0);
  const std::string a = test::read_file(dir + "/s1a.gguf");
  EXPECT_TRUE(a == test::read_file(dir + "/s1b.gguf")) << "same seed, other thread count: bytes differ";
  EXPECT_FALSE(a == test::read_file(dir + "/s2.gguf")) << "another seed gave the same bytes";
}

// The preset's metadata with a one-layer override, so the test stays small;
// Qwen2.5 has tied embeddings and Q/K/V biases; 896 columns are not a
// multiple of Q4_K's 256, so those matrices fall back to Q4_0 and say so.
TEST(MakeModelCli, PresetMetadataAndFallback) {
  const std::string path = test::temp_dir() + "/qwen.gguf";
  auto r = test::run_kvlm({"make-model", "--preset", "qwen2.5-0.5b", "--layers", "1", "--type", "Q4_K",
                           "--vocab-from", vocab(), "-o", path});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("rows of 896 values are not a multiple of Q4_K's block of 256: Q4_0 instead"),
            std::string::npos) << r.err;
  auto f = GgufFile::open(path);
  const Metadata& m = f->metadata();
  EXPECT_EQ(m.require_string("general.architecture"), "qwen2");
  EXPECT_EQ(m.require_int("qwen2.embedding_length"), 896);
  EXPECT_EQ(m.require_int("qwen2.block_count"), 1);
  EXPECT_EQ(m.require_int("qwen2.attention.head_count"), 14);
  EXPECT_EQ(m.require_int("qwen2.attention.head_count_kv"), 2);
  EXPECT_EQ(m.require_int("qwen2.feed_forward_length"), 4864);
  EXPECT_EQ(m.require_int("qwen2.context_length"), 32768);
  EXPECT_DOUBLE_EQ(*m.get_float("qwen2.rope.freq_base"), 1e6);
  EXPECT_EQ(f->find_tensor("output.weight"), nullptr);
  EXPECT_NE(f->find_tensor("blk.0.attn_k.bias"), nullptr);
  EXPECT_EQ(f->require_tensor("blk.0.ffn_down.weight").dtype, DType::kQ4_K);  // 4864 = 19 x 256
  EXPECT_EQ(f->require_tensor("blk.0.attn_q.weight").dtype, DType::kQ4_0);
  r = test::run_kvlm({"logits", "-m", path, "--tokens", "1,2"});
  EXPECT_EQ(r.exit_code, 0) << r.err;

  // TinyLlama's header (one layer, so the embedding tables dominate: ~36 MB).
  const std::string tiny = test::temp_dir() + "/tiny.gguf";
  r = test::run_kvlm({"make-model", "--preset", "tinyllama-1.1b", "--layers", "1", "--type", "Q4_0",
                      "--vocab-from", vocab(), "-o", tiny});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = test::run_kvlm({"inspect", "-m", tiny});
  EXPECT_NE(r.out.find("vocab: 32000  dim: 2048  layers: 1  heads: 32 (kv 4)  head_dim: 64  ffn: 5632"),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find("context: 2048"), std::string::npos) << r.out;
}

// Qwen3-0.6B's header cut to one layer with --scale-down (28 / 28): its own
// head size (128, not dim / heads), per-head norms and tied embeddings; the
// file loads and runs.
TEST(MakeModelCli, ScaleDownKeepsTheLayerShape) {
  const std::string path = test::temp_dir() + "/qwen3.gguf";
  auto r = test::run_kvlm({"make-model", "--preset", "qwen3-0.6b", "--scale-down", "28", "--type", "Q8_0",
                           "--vocab-from", vocab(), "-o", path});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = test::run_kvlm({"inspect", "-m", path});
  EXPECT_NE(r.out.find("vocab: 32000  dim: 1024  layers: 1  heads: 16 (kv 8)  head_dim: 128  ffn: 3072"),
            std::string::npos) << r.out;
  auto f = GgufFile::open(path);
  EXPECT_EQ(f->require_tensor("blk.0.attn_q.weight").dims, (std::vector<int64_t>{1024, 2048}));
  EXPECT_EQ(f->require_tensor("blk.0.attn_k_norm.weight").dims, (std::vector<int64_t>{128}));
  EXPECT_EQ(f->find_tensor("output.weight"), nullptr);
  r = test::run_kvlm({"logits", "-m", path, "--tokens", "1,2"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// A table larger than the tokenizer (Llama 3's 128,256 rows over a
// 32,000-token vocabulary) pads the token list with unused [PADi] tokens, as
// llama.cpp's converter does, so every row has a token and llama.cpp loads it.
TEST(MakeModelCli, ALargerVocabularyIsPaddedWithUnusedTokens) {
  const std::string path = test::temp_dir() + "/padded.gguf";
  std::vector<std::string> args = small_args("Q8_0", path);
  args.insert(args.end(), {"--vocab", "32100"});
  auto r = test::run_kvlm(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto f = GgufFile::open(path);
  const std::vector<std::string> tokens = f->metadata().require_string_array("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 32100u);
  EXPECT_EQ(tokens[31999], GgufFile::open(vocab())->metadata().require_string_array("tokenizer.ggml.tokens")[31999]);
  EXPECT_EQ(tokens[32000], "[PAD32000]");
  EXPECT_EQ(tokens[32099], "[PAD32099]");
  EXPECT_EQ(f->metadata().get_float_array("tokenizer.ggml.scores")->size(), 32100u);
  EXPECT_EQ(f->require_tensor("token_embd.weight").dims, (std::vector<int64_t>{256, 32100}));
  r = test::run_kvlm({"run", "-m", path, "-p", "Once upon a time", "-n", "4", "--temp", "0"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST(MakeModelCli, BadFlagsAreClearErrors) {
  const std::string out = test::temp_dir() + "/bad.gguf";
  struct Case {
    std::vector<std::string> extra;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--preset", "gpt-5"}, "unknown --preset 'gpt-5' (known: tinyllama-1.1b, qwen2.5-0.5b, llama-3.2-1b, llama-3-8b"},
      {{"--preset", "tinyllama-1.1b", "--type", "Q5_1"}, "--type 'Q5_1' is not one of"},
      {{"--dim", "64", "--layers", "1", "--heads", "3", "--ffn", "64"}, "--dim 64 must be --heads 3 times"},
      {{"--dim", "64", "--layers", "1", "--heads", "4", "--kv-heads", "3", "--ffn", "64"},
       "--heads 4 must be a multiple of --kv-heads 3"},
      {{"--dim", "64", "--heads", "4", "--ffn", "64"}, "without --preset, --layers is required"},
      {{"--preset", "tinyllama-1.1b", "--vocab", "100"}, "--vocab 100 is smaller than the 32000 tokens"},
      {{"--preset", "tinyllama-1.1b", "--arch", "mamba"}, "--arch 'mamba' is not supported (llama, qwen2, qwen2moe, qwen3, qwen3moe, phi3)"},
      {{"--preset", "tinyllama-1.1b", "--arch", "qwen2moe"}, "--arch qwen2moe needs --experts and --experts-used"},
      {{"--preset", "tinyllama-1.1b", "--experts", "4", "--experts-used", "5"}, "--experts-used 5 in 1..--experts"},
      {{"--preset", "qwen2.5-0.5b", "--rope-scaling", "llama3"}, "--rope-scaling llama3 is for --arch llama"},
      {{"--preset", "phi-3-mini-4k", "--tied"}, "--arch phi3 has an output.weight of its own"},
      {{"--preset", "mixtral-8x7b", "--scale-down", "0"}, "--scale-down 0 must be at least 1"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = {"make-model", "--vocab-from", vocab(), "-o", out};
    args.insert(args.end(), c.extra.begin(), c.extra.end());
    auto r = test::run_kvlm(args);
    EXPECT_EQ(r.exit_code, 1) << c.message;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
  }
  auto r = test::run_kvlm({"make-model", "--preset", "tinyllama-1.1b", "--vocab-from", "/nonexistent.gguf", "-o", out});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("/nonexistent.gguf"), std::string::npos) << r.err;
}

}  // namespace kvlm::make_model_cli_test
