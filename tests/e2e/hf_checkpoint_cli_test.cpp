// Hugging Face checkpoint folders through the real binary: `-m DIR` generates
// the same greedy tokens and logits as the GGUF the folder was written from
// (tests/support/hf_folder), `kvlm convert` writes that GGUF back tensor for
// tensor, and `--quantize` while loading equals converting with --type.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "model/gguf.h"
#include "model/hf_tokenizer.h"
#include "support/hf_folder.h"
#include "support/test_support.h"
#include "tokenizer/tokenizer.h"

namespace kvlm::hf_checkpoint_cli_test {

namespace fs = std::filesystem;

std::string folder_from(const std::string& model, const test::HfFolderOptions& o = {}) {
  auto gguf = GgufFile::open(test::shared_path("models/" + model));
  const std::string dir = test::temp_path(model + std::to_string(o.num_shards));
  test::write_hf_folder(*gguf, dir, o);
  return dir;
}

std::string greedy_ids(const std::string& model, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args = {"run", "-m", model, "-p", "Once upon a time", "-n", "48", "--temp", "0",
                                   "--ignore-eos", "--show-ids"};
  args.insert(args.end(), extra.begin(), extra.end());
  auto r = test::run_kvlm(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::smatch m;
  EXPECT_TRUE(std::regex_search(r.err, m, std::regex("ids: ([0-9 ]+)"))) << r.err;
  return m.empty() ? "" : m[1].str();
}

std::string logits(const std::string& model, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args = {"logits", "-m", model, "--tokens", "1,403,407,261,378,29,65,300"};
  args.insert(args.end(), extra.begin(), extra.end());
  auto r = test::run_kvlm(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.out;
}

TEST(HfCheckpointCli, GreedyTokensAndLogitsEqualTheGguf) {
  for (const char* model : {"stories260K.gguf", "synth-qwen2-F32.gguf", "synth-gemma2-F32.gguf", "synth-gpt2-F16.gguf"}) {
    const std::string gguf = test::shared_path(std::string("models/") + model);
    const std::string dir = folder_from(model, test::HfFolderOptions::shards(2));
    const std::string ids = greedy_ids(gguf);
    EXPECT_EQ(std::count(ids.begin(), ids.end(), ' '), 47) << ids;
    EXPECT_EQ(greedy_ids(dir), ids) << model;
    EXPECT_EQ(logits(dir), logits(gguf)) << model << ": logits differ";
  }
}

// Experts: the folder's experts are separate tensors, which the forward pass
// reads where they lie in the mapping (one slice per expert).
TEST(HfCheckpointCli, MixtralFolderGeneratesAsItsGguf) {
  const std::string gguf = test::temp_path("mixtral.gguf");
  auto r = test::run_kvlm({"make-model", "--arch", "llama", "--experts", "4", "--experts-used", "2", "--dim", "64",
                           "--layers", "2", "--heads", "4", "--kv-heads", "2", "--ffn", "96", "--ctx", "256", "--type",
                           "F16", "--vocab-from", test::shared_path("models/stories260K.gguf"), "-o", gguf});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string dir = test::temp_path("mixtral");
  test::write_hf_folder(*GgufFile::open(gguf), dir);
  EXPECT_EQ(greedy_ids(dir), greedy_ids(gguf));
  EXPECT_EQ(logits(dir), logits(gguf));
}

// Phi-3: fused qkv_proj and gate_up_proj, a window, and long-rope's factors
// in config.json (the families test's model, whose perplexity equals
// llama.cpp's: model_families_test.cpp). At a context past the original
// the long factors and the attention factor apply; the folder must agree
// there too. Its `kvlm convert` output is the GGUF again, tensor for tensor.
TEST(HfCheckpointCli, Phi3FolderGeneratesAsItsGguf) {
  const std::string gguf = test::temp_path("phi3.gguf");
  auto r = test::run_kvlm({"make-model", "--dim", "64", "--layers", "2", "--heads", "4", "--kv-heads", "2", "--ffn",
                           "96", "--std", "0.3", "--seed", "7", "-t", "1", "--arch", "phi3", "--ctx", "256",
                           "--sliding-window", "32", "--rope-scaling", "longrope", "--rope-original-ctx", "64", "--type",
                           "F32", "--vocab-from", test::shared_path("models/stories260K.gguf"), "-o", gguf});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string dir = test::temp_path("phi3");
  test::write_hf_folder(*GgufFile::open(gguf), dir);
  EXPECT_EQ(greedy_ids(dir), greedy_ids(gguf));
  EXPECT_EQ(logits(dir), logits(gguf));
  const std::string text = test::shared_path("text/tinystories_sample.txt");
  auto ppl = [&](const std::string& m, const char* ctx) {
    auto p = test::run_kvlm({"perplexity", "-m", m, "-f", text, "-c", ctx, "--chunks", "4", "-t", "1"});
    EXPECT_EQ(p.exit_code, 0) << p.err;
    return p.out;
  };
  EXPECT_EQ(ppl(dir, "128"), ppl(gguf, "128")) << "long factors";
  EXPECT_EQ(ppl(dir, "64"), ppl(gguf, "64")) << "short factors";
  const std::string back = test::temp_path("phi3-back.gguf");
  r = test::run_kvlm({"convert", dir, "-o", back});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto a = GgufFile::open(gguf), b = GgufFile::open(back);
  for (const GgufTensor& t : a->tensors()) {
    const GgufTensor* u = b->find_tensor(t.name);
    ASSERT_TRUE(u) << t.name;
    EXPECT_EQ(u->dims, t.dims) << t.name;
    EXPECT_EQ(std::memcmp(u->data, t.data, t.num_bytes), 0) << t.name;
  }
  for (const char* key : {"phi3.attention.sliding_window", "phi3.rope.scaling.original_context_length"})
    EXPECT_EQ(b->metadata().require_int(key), a->metadata().require_int(key)) << key;
  EXPECT_EQ(b->metadata().require_float("phi3.rope.scaling.attn_factor"),
            a->metadata().require_float("phi3.rope.scaling.attn_factor"));
}

// Gemma-2's norms go through HF's w - 1 and back: the same bytes again.
TEST(HfCheckpointCli, ConvertWritesTheGgufBack) {
  for (const char* model : {"stories260K.gguf", "synth-gemma2-F32.gguf", "synth-gpt2-F16.gguf"}) {
    const std::string gguf_path = test::shared_path(std::string("models/") + model);
    const std::string dir = folder_from(model);
    const std::string out = test::temp_path(std::string("converted-") + model);
    auto r = test::run_kvlm({"convert", dir, "-o", out});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto a = GgufFile::open(gguf_path), b = GgufFile::open(out);
    ASSERT_EQ(b->tensors().size(), a->tensors().size()) << model;
    for (const GgufTensor& t : a->tensors()) {
      const GgufTensor* c = b->find_tensor(t.name);
      ASSERT_NE(c, nullptr) << t.name;
      EXPECT_EQ(c->dims, t.dims) << t.name;
      ASSERT_EQ(c->num_bytes, t.num_bytes) << t.name;
      EXPECT_EQ(std::memcmp(c->data, t.data, t.num_bytes), 0) << model << ": " << t.name;
    }
    EXPECT_EQ(b->metadata().require_string_array("tokenizer.ggml.tokens"),
              a->metadata().require_string_array("tokenizer.ggml.tokens"));
    EXPECT_EQ(greedy_ids(out), greedy_ids(gguf_path)) << model;
  }
}

TEST(HfCheckpointCli, QuantizeWhileLoadingEqualsConvertingFirst) {
  const std::string dir = folder_from("synth-tiny-F16.gguf", test::HfFolderOptions::of_type(DType::kBF16));
  for (const char* type : {"q8_0", "q4_k"}) {
    const std::string out = test::temp_path(std::string(type) + ".gguf");
    auto r = test::run_kvlm({"convert", dir, "-o", out, "--type", type});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(GgufFile::open(out)->find_tensor("blk.0.attn_q.weight")->dtype, dtype_from_name(type).value());
    EXPECT_EQ(logits(dir, {"--quantize", type}), logits(out)) << type;
    EXPECT_EQ(greedy_ids(dir, {"--quantize", type}), greedy_ids(out)) << type;
  }
  auto r = test::run_kvlm({"run", "-m", dir, "-p", "x", "--quantize", "q5_1"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("q8_0, q4_0, q4_k"), std::string::npos) << r.err;
}

TEST(HfCheckpointCli, ServeLoadsAFolder) {
  const std::string dir = folder_from("stories260K.gguf");
  test::ServerProcess server({"-m", dir, "--ctx", "512"});
  ASSERT_GT(server.port(), 0) << server.err_so_far();
  httplib::Client cli("127.0.0.1", server.port());
  auto res = cli.Post("/v1/completions", R"({"prompt":"Once upon a time","max_tokens":8,"temperature":0})",
                      "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  auto j = nlohmann::json::parse(res->body);
  const std::string r_out = res->body;
  EXPECT_EQ(j["usage"]["completion_tokens"], 8) << r_out;
}

// generation_config.json's sampling is the default for what a request
// leaves unset (--generation-config auto), and OpenAI's is with none.
TEST(HfCheckpointCli, GenerationConfigGivesTheDefaultSampling) {
  const std::string dir = folder_from("stories260K.gguf");
  std::ofstream(dir + "/generation_config.json") << R"({"temperature": 0.0, "top_p": 0.9, "eos_token_id": 2})";
  auto text = [](const test::ServerProcess& s, const std::string& fields) {
    httplib::Client cli("127.0.0.1", s.port());
    auto res = cli.Post("/v1/completions", R"({"prompt":"Once upon a time","max_tokens":24,"ignore_eos":true)" + fields + "}",
                        "application/json");
    EXPECT_TRUE(res && res->status == 200) << (res ? res->body : "no answer");
    return res ? nlohmann::json::parse(res->body)["choices"][0]["text"].get<std::string>() : "";
  };
  test::ServerProcess model_defaults({"-m", dir, "--ctx", "512"});
  const std::string greedy = text(model_defaults, R"(,"temperature":0)");
  EXPECT_EQ(text(model_defaults, R"(,"seed":1)"), greedy) << "temperature 0 from generation_config.json";
  EXPECT_EQ(text(model_defaults, R"(,"seed":2)"), greedy);
  EXPECT_NE(text(model_defaults, R"(,"seed":2,"temperature":1)"), greedy) << "the request's own value wins";
  test::ServerProcess openai_defaults({"-m", dir, "--ctx", "512", "--generation-config", "none"});
  EXPECT_NE(text(openai_defaults, R"(,"seed":1)"), text(openai_defaults, R"(,"seed":2)")) << "temperature 1";
}

// tokenizer.json as kvlm reads it against Hugging Face's own JavaScript
// implementation (@huggingface/tokenizers, in tests/npm as a dependency of
// @langchain/core) on every llama.cpp test string of each vocabulary.
class HfTokenizerAgainstJs : public ::testing::TestWithParam<std::string> {};

TEST_P(HfTokenizerAgainstJs, SameIds) {
  const std::string module = std::string(KVLM_SOURCE_DIR) + "/tests/npm/node_modules/@huggingface/tokenizers";
  ASSERT_TRUE(test::have_program("node")) << "node is required (scripts/setup.sh installs it)";
  ASSERT_TRUE(fs::exists(module)) << module << " is missing: run scripts/setup.sh (npm ci --prefix tests/npm)";
  const std::string rel = "vocab/ggml-vocab-" + GetParam() + ".gguf";
  auto gguf = GgufFile::open(test::shared_path(rel));
  const std::string dir = test::temp_path("js-" + GetParam());
  fs::create_directories(dir);
  std::ofstream(dir + "/tokenizer.json") << test::hf_tokenizer_json(gguf->metadata()).dump();
  std::ofstream(dir + "/tokenizer_config.json") << test::hf_tokenizer_config_json(gguf->metadata(), false).dump();
  nlohmann::json strings = nlohmann::json::array();
  for (const auto& c : test::read_vocab_cases(rel)) strings.push_back(c.text);
  std::ofstream(dir + "/strings.json") << strings.dump();
  auto r = test::run_program({"node", std::string(KVLM_SOURCE_DIR) + "/tests/npm/hf_tokenize.mjs", dir, dir + "/strings.json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto js = nlohmann::json::parse(r.out);
  Metadata m;
  read_hf_tokenizer(dir, -1, -1, m);
  auto tok = Tokenizer::from_metadata(m);
  ASSERT_EQ(js.size(), strings.size());
  size_t num_same = 0;
  for (size_t i = 0; i < strings.size(); ++i) {
    const std::vector<int32_t> ids = tok->encode(strings[i].get<std::string>(), false, false);
    if (ids == js[i].get<std::vector<int32_t>>()) ++num_same;
    else ADD_FAILURE() << GetParam() << ": '" << strings[i].get<std::string>() << "'\n  js:   " << js[i].dump();
  }
  std::printf("[ js       ] %-16s %zu/%zu the same\n", GetParam().c_str(), num_same, strings.size());
}

INSTANTIATE_TEST_SUITE_P(Vocabs, HfTokenizerAgainstJs,
                         ::testing::Values("gpt-2", "llama-spm", "phi-3", "deepseek-coder", "falcon", "starcoder"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) if (c == '-') c = '_';
                           return n;
                         });

}  // namespace kvlm::hf_checkpoint_cli_test
