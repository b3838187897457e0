// Hugging Face checkpoint folders (model/hf_checkpoint.h), written from the
// shared GGUF models by tests/support/hf_folder: the folder must give back the
// GGUF's tensors byte for byte (so the same logits) and its configuration,
// and tokenizer.json must tokenize every llama.cpp test vector as the GGUF
// vocabulary does. What kvlm cannot load is refused naming the field.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>

#include "backend/fp16.h"
#include "common/error.h"
#include "model/config.h"
#include "model/hf_checkpoint.h"
#include "model/hf_config.h"
#include "model/hf_tokenizer.h"
#include "model/make_model.h"
#include "model/quantize_tensors.h"
#include "support/hf_folder.h"
#include "support/test_support.h"
#include "tokenizer/tokenizer.h"

namespace kvlm {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

struct FolderCase {
  const char* model;  // under ../shared/models
  int num_shards;
};

class HfFolder : public ::testing::TestWithParam<FolderCase> {};

TEST_P(HfFolder, GivesTheGgufTensorsAndConfig) {
  auto gguf = GgufFile::open(test::shared_path(std::string("models/") + GetParam().model));
  const std::string dir = test::temp_path(std::string(GetParam().model) + std::to_string(GetParam().num_shards));
  test::write_hf_folder(*gguf, dir, test::HfFolderOptions::shards(GetParam().num_shards));
  auto hf = open_model_file(dir);
  ASSERT_EQ(hf->tensors().size(), gguf->tensors().size());
  for (const GgufTensor& t : gguf->tensors()) {
    const GgufTensor* h = hf->find_tensor(t.name);
    ASSERT_NE(h, nullptr) << t.name;
    EXPECT_EQ(h->dims, t.dims) << t.name;
    ASSERT_EQ(h->dtype, t.dtype) << t.name;
    ASSERT_EQ(h->num_bytes, t.num_bytes) << t.name;
    EXPECT_EQ(std::memcmp(h->data, t.data, t.num_bytes), 0) << t.name << " differs";
  }
  // Every hyper-parameter but the name (the folder's name for a checkpoint).
  auto without_name = [](const Metadata& m) {
    const std::string d = ModelConfig::from_metadata(m).describe();
    return d.substr(d.find('\n'));
  };
  EXPECT_EQ(without_name(hf->metadata()), without_name(gguf->metadata()));
  auto a = Tokenizer::from_metadata(gguf->metadata()), b = Tokenizer::from_metadata(hf->metadata());
  const std::string text = "Once upon a time, there was a little girl named Lily. She said: \"Hi!\"\n\n  end";
  EXPECT_EQ(b->encode(text, true, true), a->encode(text, true, true));
  EXPECT_EQ(b->vocab().special().eos, a->vocab().special().eos);
}

INSTANTIATE_TEST_SUITE_P(Models, HfFolder,
                         ::testing::Values(FolderCase{"stories260K.gguf", 1}, FolderCase{"stories260K.gguf", 3},
                                           FolderCase{"synth-qwen2-F32.gguf", 1}, FolderCase{"synth-tiny-F16.gguf", 2}),
                         [](const auto& info) {
                           std::string n = std::string(info.param.model).substr(0, std::string(info.param.model).find('.'));
                           for (char& c : n) if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n + "_" + std::to_string(info.param.num_shards) + "shard";
                         });

// The families make-model writes (random F16 weights): Mixtral-style MoE,
// Qwen2-MoE with its shared expert, Qwen3 and Qwen3-MoE. Each expert of the
// folder is its own tensor; the loader stacks them back without a copy.
class HfFolderFamilies : public ::testing::TestWithParam<std::string> {};

TEST_P(HfFolderFamilies, GiveTheGgufTensors) {
  MakeModelOptions o;
  o.shape.arch = GetParam() == "mixtral" ? "llama" : GetParam();
  o.shape.dim = 64;
  o.shape.num_layers = 2;
  o.shape.num_heads = 4;
  o.shape.num_kv_heads = 2;
  o.shape.ffn_dim = 96;
  o.shape.context_length = 256;
  if (GetParam() != "qwen3") {
    o.shape.num_experts = 4;
    o.shape.num_experts_used = 2;
    if (GetParam() != "mixtral") o.shape.expert_ffn_dim = 32;
    if (GetParam() == "qwen2moe") o.shape.shared_expert_ffn_dim = 64;
  }
  o.type = DType::kF16;
  o.vocab_from = test::shared_path("models/stories260K.gguf");
  o.out_path = test::temp_path(GetParam() + ".gguf");
  make_model(o, [](const std::string&) {});
  auto gguf = GgufFile::open(o.out_path);
  const std::string dir = test::temp_path(GetParam());
  test::write_hf_folder(*gguf, dir);
  auto hf = open_model_file(dir);
  ASSERT_EQ(hf->tensors().size(), gguf->tensors().size());
  for (const GgufTensor& t : gguf->tensors()) {
    const GgufTensor* h = hf->find_tensor(t.name);
    ASSERT_NE(h, nullptr) << t.name;
    EXPECT_EQ(h->dims, t.dims) << t.name;
    ASSERT_EQ(h->num_bytes, t.num_bytes) << t.name;
    size_t offset = 0;
    for (const auto& [data, size] : h->byte_ranges()) {
      EXPECT_EQ(std::memcmp(data, t.data + offset, size), 0) << t.name << " differs at byte " << offset;
      offset += size;
    }
  }
  if (GetParam() != "qwen3") {
    EXPECT_EQ(hf->find_tensor("blk.1.ffn_up_exps.weight")->slices.size(), 4u);
  }
  auto without_name = [](const Metadata& m) {
    const std::string d = ModelConfig::from_metadata(m).describe();
    return d.substr(d.find('\n'));
  };
  EXPECT_EQ(without_name(hf->metadata()), without_name(gguf->metadata()));
}

INSTANTIATE_TEST_SUITE_P(Families, HfFolderFamilies, ::testing::Values("mixtral", "qwen2moe", "qwen3", "qwen3moe"),
                         [](const auto& info) { return info.param; });

// BF16 checkpoints: each value is the F32 GGUF's rounded to BF16, read in place.
TEST(HfFolder, ReadsBf16) {
  auto gguf = GgufFile::open(test::shared_path("models/stories260K.gguf"));
  const std::string dir = test::temp_path("bf16");
  test::write_hf_folder(*gguf, dir, test::HfFolderOptions::of_type(DType::kBF16));
  auto hf = open_model_file(dir);
  const GgufTensor* h = hf->find_tensor("blk.0.ffn_down.weight");
  const GgufTensor* t = gguf->find_tensor("blk.0.ffn_down.weight");
  ASSERT_TRUE(h && t);
  ASSERT_EQ(h->dtype, DType::kBF16);
  const auto* f = reinterpret_cast<const float*>(t->data);
  const auto* b = reinterpret_cast<const uint16_t*>(h->data);
  for (int64_t i = 0; i < t->num_elements(); ++i) ASSERT_EQ(b[i], f32_to_bf16(f[i])) << i;
  // Norms come back as F32 for GGUF (llama.cpp's converter writes vectors so).
  auto converted = convert_tensors(std::move(hf), std::nullopt);
  EXPECT_EQ(converted->find_tensor("blk.0.attn_norm.weight")->dtype, DType::kF32);
  EXPECT_EQ(converted->find_tensor("blk.0.ffn_down.weight")->dtype, DType::kBF16);
}

// tokenizer.json of each llama.cpp vocabulary, read back, tokenizes every
// test string to llama.cpp's ids.
class HfTokenizerVectors : public ::testing::TestWithParam<std::string> {};

TEST_P(HfTokenizerVectors, TokenizeAsLlamaCpp) {
  const std::string rel = "vocab/ggml-vocab-" + GetParam() + ".gguf";
  auto gguf = GgufFile::open(test::shared_path(rel));
  const std::string dir = test::temp_path("tok-" + GetParam());
  fs::create_directories(dir);
  std::ofstream(dir + "/tokenizer.json") << test::hf_tokenizer_json(gguf->metadata()).dump();
  Metadata m;
  read_hf_tokenizer(dir, -1, -1, m);
  auto tok = Tokenizer::from_metadata(m);
  const std::vector<test::VocabCase> cases = test::read_vocab_cases(rel);
  ASSERT_FALSE(cases.empty());
  size_t num_passed = 0;
  for (const auto& c : cases) {
    const std::vector<int32_t> ids = tok->encode(c.text, false, false);
    if (ids == c.expected) ++num_passed;
    else ADD_FAILURE() << rel << ": '" << c.text << "'";
  }
  EXPECT_EQ(num_passed, cases.size());
}

INSTANTIATE_TEST_SUITE_P(Vocabs, HfTokenizerVectors,
                         ::testing::Values("gpt-2", "llama-spm", "phi-3", "deepseek-coder", "falcon", "starcoder"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) if (c == '-') c = '_';
                           return n;
                         });

// A folder written from stories260K with one file edited.
std::string edited_folder(const std::string& name, const std::string& file, const std::function<void(Json&)>& edit) {
  auto gguf = GgufFile::open(test::shared_path("models/stories260K.gguf"));
  const std::string dir = test::temp_path(name);
  test::write_hf_folder(*gguf, dir);
  Json j = Json::parse(std::ifstream(dir + "/" + file));
  edit(j);
  std::ofstream(dir + "/" + file) << j.dump();
  return dir;
}

void expect_refused(const std::string& dir, const std::string& needle) {
  try {
    open_model_file(dir);
    ADD_FAILURE() << "loaded; expected an error naming " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(HfFolderRefuses, UnknownConfigField) {
  expect_refused(edited_folder("f1", "config.json", [](Json& j) { j["attn_logit_softcapping"] = 50.0; }),
                 "'attn_logit_softcapping'");
}

TEST(HfFolderRefuses, RopeScalingKvlmDoesNotImplement) {
  expect_refused(edited_folder("f2", "config.json", [](Json& j) { j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}}; }),
                 "'rope_scaling.rope_type' = \"yarn\"");
}

TEST(HfFolderRefuses, AnotherArchitecture) {
  expect_refused(edited_folder("f3", "config.json", [](Json& j) { j["architectures"] = {"GPTNeoXForCausalLM"}; }),
                 "GPTNeoXForCausalLM");
}

TEST(HfFolderRefuses, ActivationOtherThanSilu) {
  expect_refused(edited_folder("f4", "config.json", [](Json& j) { j["hidden_act"] = "gelu"; }), "'hidden_act'");
}

TEST(HfFolderRefuses, UnigramTokenizer) {
  expect_refused(edited_folder("f5", "tokenizer.json", [](Json& j) { j["model"]["type"] = "Unigram"; }), "'model.type'");
}

TEST(HfFolderRefuses, NormalizerKvlmDoesNotApply) {
  expect_refused(edited_folder("f6", "tokenizer.json", [](Json& j) { j["normalizer"] = {{"type", "NFKC"}}; }),
                 "'normalizer'");
}

// GPT-2's names with and without the `transformer.` prefix; the causal-mask
// buffers older checkpoints keep load as nothing; Conv1D weights transpose.
TEST(HfFolder, Gpt2NamesAndTheirConv1dWeights) {
  auto n = gpt2_gguf_name("transformer.h.11.attn.c_attn.weight");
  ASSERT_TRUE(n);
  EXPECT_EQ(n->name, "blk.11.attn_qkv.weight");
  EXPECT_EQ(n->layer, 11);
  EXPECT_TRUE(n->transpose);
  n = gpt2_gguf_name("h.3.mlp.c_proj.bias");
  ASSERT_TRUE(n);
  EXPECT_EQ(n->name, "blk.3.ffn_down.bias");
  EXPECT_FALSE(n->transpose);
  EXPECT_FALSE(gpt2_gguf_name("h.3.ln_2.weight")->transpose);
  EXPECT_EQ(gpt2_gguf_name("wpe.weight")->name, "position_embd.weight");
  EXPECT_EQ(gpt2_gguf_name("transformer.ln_f.bias")->name, "output_norm.bias");
  EXPECT_EQ(gpt2_gguf_name("h.0.attn.masked_bias")->name, "");
  EXPECT_FALSE(gpt2_gguf_name("h.0.attn.c_attn.scale"));
  EXPECT_FALSE(gpt2_gguf_name("h.x.ln_1.weight"));
  EXPECT_FALSE(gpt2_gguf_name("score.weight"));
}

// Gemma-2 27B scales its queries by hidden_size / heads, not head_dim: refused
// by name rather than loaded as a different model.
TEST(HfFolderRefuses, Gemma2QueryScaleOtherThanTheHeadSize) {
  auto gguf = GgufFile::open(test::shared_path("models/synth-gemma2-F32.gguf"));
  const std::string dir = test::temp_path("gemma2-scale");
  test::write_hf_folder(*gguf, dir);
  EXPECT_NO_THROW(open_model_file(dir));
  Json j = Json::parse(std::ifstream(dir + "/config.json"));
  j["query_pre_attn_scalar"] = j["head_dim"].get<int64_t>() + 16;
  std::ofstream(dir + "/config.json") << j.dump();
  expect_refused(dir, "'query_pre_attn_scalar'");
}

// llama3 rope scaling: the factors become rope_freqs.weight, as llama.cpp's converter writes them.
TEST(HfFolder, Llama3RopeScalingBecomesRopeFreqs) {
  const std::string dir = edited_folder("llama3", "config.json", [](Json& j) {
    j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 64}};
  });
  auto hf = open_model_file(dir);
  const GgufTensor* f = hf->find_tensor("rope_freqs.weight");
  ASSERT_NE(f, nullptr);
  const auto* v = reinterpret_cast<const float*>(f->data);
  EXPECT_EQ(v[0], 1.0f);                   // the fastest pair keeps its frequency
  EXPECT_EQ(v[f->dims[0] - 1], 8.0f);      // the slowest is slowed by `factor`
}

}  // namespace
}  // namespace kvlm

namespace kvlm {
namespace {

// A sentence-transformers folder's Pooling module becomes pooling_type,
// which the server's /v1/embeddings and kvlm embed follow (choose_pooling:
// tests/unit/engine/embed_test.cpp).
TEST(HfFolder, SentenceTransformersPoolingBecomesPoolingType) {
  auto gguf = GgufFile::open(test::shared_path("models/stories260K.gguf"));
  const std::string dir = test::temp_path("pooling");
  test::write_hf_folder(*gguf, dir);
  EXPECT_EQ(ModelConfig::from_metadata(open_model_file(dir)->metadata()).pooling_type, -1);

  fs::create_directories(dir + "/pool");
  std::ofstream(dir + "/modules.json")
      << R"([{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},)"
      << R"({"idx":1,"name":"1","path":"pool","type":"sentence_transformers.models.Pooling"}])";
  std::ofstream(dir + "/pool/config.json") << R"({"word_embedding_dimension":64,"pooling_mode_mean_tokens":true})";
  ModelConfig c = ModelConfig::from_metadata(open_model_file(dir)->metadata());
  EXPECT_EQ(c.pooling_type, 1);

  std::ofstream(dir + "/pool/config.json") << R"({"pooling_mode_cls_token":true})";
  c = ModelConfig::from_metadata(open_model_file(dir)->metadata());
  EXPECT_EQ(c.pooling_type, 2);
}

}  // namespace
}  // namespace kvlm
