// load_lora's refusals, each with its code and a message that names the
// cause: another architecture or shape, modules kvlm cannot apply, an A
// without its B, a broken or unsupported adapter_config.json, missing files.
// Also PEFT's rank_pattern / alpha_pattern, which only change the scale.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "common/error.h"
#include "model/gguf_writer.h"
#include "model/lora_load.h"
#include "model/make_lora.h"
#include "model/safetensors_writer.h"
#include "unit/model/lora_test_support.h"

namespace kvlm {
namespace {

using Json = nlohmann::json;

class LoraErrors : public ::testing::Test {
 protected:
  void SetUp() override { base_ = test::shared_lora_base("models/synth-tiny-F32.gguf"); }

  // Loads `path`, expecting Error(code) whose message holds every `parts`.
  void expect_error(const std::string& path, ErrorCode code, const std::vector<std::string>& parts) {
    try {
      load_lora(path, *base_.file, base_.config, default_backend());
      ADD_FAILURE() << path << ": loaded";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      for (const std::string& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
  }

  Json config(int64_t r = 4) const {
    return {{"peft_type", "LORA"}, {"r", r}, {"lora_alpha", 8}, {"target_modules", {"q_proj"}}, {"bias", "none"}};
  }
  // A PEFT folder of `config` and tensors of F32 zeros of the given shapes.
  std::string peft(const std::string& name, const Json& config,
                   const std::vector<std::pair<std::string, std::vector<int64_t>>>& tensors) {
    const std::string dir = test::temp_path(name);
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/adapter_config.json") << config.dump();
    SafetensorsWriter w;
    for (const auto& [tensor, shape] : tensors)
      w.add(tensor, DType::kF32, shape, std::vector<uint8_t>(static_cast<size_t>(shape[0] * shape[1]) * 4, 0));
    w.write(dir + "/adapter_model.safetensors");
    return dir;
  }
  std::string q_name(int layer, const char* ab) const {
    return "base_model.model.model.layers." + std::to_string(layer) + ".self_attn.q_proj.lora_" + ab + ".weight";
  }
  int64_t dim() const { return base_.config.dim; }

  test::LoraBase base_;
};

TEST_F(LoraErrors, AnotherArchitecture) {
  MakeLoraOptions o;
  o.base_path = test::shared_path("models/synth-gpt2-F16.gguf");
  o.out_path = test::temp_path("gpt2-lora.gguf");
  o.format = LoraFormat::kGguf;
  make_lora(o);
  expect_error(o.out_path, ErrorCode::kInvalidArgument, {"architecture 'gpt2'", "base model is 'llama'"});
}

TEST_F(LoraErrors, AnotherShape) {
  const std::string dir = peft("shape", config(), {{q_name(0, "A"), {4, dim() + 2}}, {q_name(0, "B"), {dim(), 4}}});
  expect_error(dir, ErrorCode::kInvalidArgument,
               {"model.layers.0.self_attn.q_proj", "blk.0.attn_q.weight", "made for another model"});
}

TEST_F(LoraErrors, RankOfAAndBDisagree) {
  const std::string dir = peft("rank", config(), {{q_name(0, "A"), {4, dim()}}, {q_name(0, "B"), {dim(), 3}}});
  expect_error(dir, ErrorCode::kCorrupt, {"the rank"});
}

TEST_F(LoraErrors, LayerPastTheBase) {
  const int n = base_.config.num_layers;
  const std::string dir = peft("layer", config(), {{q_name(n, "A"), {4, dim()}}, {q_name(n, "B"), {dim(), 4}}});
  expect_error(dir, ErrorCode::kInvalidArgument, {"layer " + std::to_string(n), "has " + std::to_string(n) + " layers"});
}

TEST_F(LoraErrors, ModulesItCannotApplyAreNamed) {
  const std::string dir = peft("unsupported", config(),
                               {{q_name(0, "A"), {4, dim()}}, {q_name(0, "B"), {dim(), 4}},
                                {"base_model.model.lm_head.lora_A.weight", {4, dim()}},
                                {"base_model.model.lm_head.lora_B.weight", {base_.config.vocab_size, 4}},
                                {"base_model.model.model.embed_tokens.lora_embedding_A", {4, 8}},
                                {"base_model.model.model.layers.0.input_layernorm.lora_A.weight", {4, dim()}},
                                {"base_model.model.model.layers.0.input_layernorm.lora_B.weight", {dim(), 4}}});
  expect_error(dir, ErrorCode::kUnsupported,
               {"'lm_head'", "lora_embedding_A", "'model.layers.0.input_layernorm'", "attn_q, attn_k"});
}

TEST_F(LoraErrors, GgufTensorsItCannotApplyAreNamed) {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_string("general.type", "adapter");
  w.set_string("adapter.type", "lora");
  w.set_f32("adapter.lora.alpha", 8);
  w.add_tensor("token_embd.weight.lora_a", {base_.config.vocab_size, 4}, DType::kF32,
               std::vector<uint8_t>(static_cast<size_t>(base_.config.vocab_size) * 16));
  w.add_tensor("token_embd.weight.lora_b", {4, dim()}, DType::kF32, std::vector<uint8_t>(static_cast<size_t>(dim()) * 16));
  w.add_tensor("blk.0.attn_q.weight.lora_a", {dim(), 4}, DType::kF32, std::vector<uint8_t>(static_cast<size_t>(dim()) * 16));
  const std::string path = test::temp_path("unsupported.gguf");
  w.write(path);
  expect_error(path, ErrorCode::kUnsupported, {"'token_embd.weight'", "'blk.0.attn_q.weight (no lora_b)'"});
}

TEST_F(LoraErrors, AWithoutItsB) {
  const std::string dir = peft("no-b", config(), {{q_name(0, "A"), {4, dim()}}});
  expect_error(dir, ErrorCode::kUnsupported, {"'model.layers.0.self_attn.q_proj (no lora_B)'"});
}

TEST_F(LoraErrors, EmptyAdapter) {
  expect_error(peft("empty", config(), {}), ErrorCode::kUnsupported, {"no LoRA tensors"});
}

TEST_F(LoraErrors, CorruptConfig) {
  const std::string dir = peft("corrupt", config(), {{q_name(0, "A"), {4, dim()}}, {q_name(0, "B"), {dim(), 4}}});
  std::ofstream(dir + "/adapter_config.json") << "{\"r\": 4, ";
  expect_error(dir, ErrorCode::kCorrupt, {"adapter_config.json", "not a JSON object"});
  std::ofstream(dir + "/adapter_config.json") << "{\"r\": 0, \"lora_alpha\": 8}";
  expect_error(dir, ErrorCode::kCorrupt, {"'r' must be a positive integer"});
}

TEST_F(LoraErrors, DoraBiasAndOtherMethods) {
  const std::vector<std::pair<std::string, std::vector<int64_t>>> t = {{q_name(0, "A"), {4, dim()}},
                                                                        {q_name(0, "B"), {dim(), 4}}};
  Json c = config();
  c["use_dora"] = true;
  expect_error(peft("dora", c, t), ErrorCode::kUnsupported, {"'use_dora'", "DoRA"});
  c = config();
  c["bias"] = "lora_only";
  expect_error(peft("bias", c, t), ErrorCode::kUnsupported, {"'bias'", "lora_only"});
  c = config();
  c["peft_type"] = "IA3";
  expect_error(peft("ia3", c, t), ErrorCode::kUnsupported, {"'peft_type'", "other than LoRA"});
  c = config();
  c["rank_pattern"] = {{"layers\\.0\\..*q_proj", 4}};
  expect_error(peft("regex", c, t), ErrorCode::kUnsupported, {"regular expression"});
}

TEST_F(LoraErrors, MissingFiles) {
  expect_error(test::temp_path("nothing-here"), ErrorCode::kNotFound, {"nothing-here", "no such LoRA adapter"});
  const std::string dir = peft("no-config", config(), {{q_name(0, "A"), {4, dim()}}, {q_name(0, "B"), {dim(), 4}}});
  std::filesystem::remove(dir + "/adapter_config.json");
  expect_error(dir, ErrorCode::kNotFound, {"adapter_config.json"});
  const std::string dir2 = peft("no-weights", config(), {});
  std::filesystem::remove(dir2 + "/adapter_model.safetensors");
  expect_error(dir2, ErrorCode::kNotFound, {"adapter_model.safetensors"});
  std::ofstream(dir2 + "/adapter_model.bin") << "pickle";
  expect_error(dir2, ErrorCode::kUnsupported, {"adapter_model.bin", "safe_serialization"});
}

TEST_F(LoraErrors, NotAnAdapterGguf) {
  expect_error(test::shared_path("models/synth-tiny-F32.gguf"), ErrorCode::kInvalidArgument,
               {"general.type", "not a LoRA adapter"});
}

// rank_pattern and alpha_pattern by name and dotted suffix, first match first.
TEST_F(LoraErrors, RankAndAlphaPatterns) {
  auto v = [&](int layer, const char* ab) {
    return "base_model.model.model.layers." + std::to_string(layer) + ".self_attn.v_proj.lora_" + ab + ".weight";
  };
  const int64_t kv = base_.config.kv_dim();
  Json c = config(4);
  c["rank_pattern"] = {{"model.layers.1.self_attn.v_proj", 2}, {"v_proj", 6}};
  c["alpha_pattern"] = {{"layers.0.self_attn.v_proj", 3}, {"q_proj", 10}};
  const std::string dir = peft("patterns", c,
                               {{q_name(0, "A"), {4, dim()}}, {q_name(0, "B"), {dim(), 4}},
                                {v(0, "A"), {6, dim()}}, {v(0, "B"), {kv, 6}},
                                {v(1, "A"), {2, dim()}}, {v(1, "B"), {kv, 2}}});
  const auto a = load_lora(dir, *base_.file, base_.config, default_backend());
  EXPECT_FLOAT_EQ(a->pair(0, LoraTarget::kQ)->scale, 10.0f / 4);
  EXPECT_FLOAT_EQ(a->pair(0, LoraTarget::kV)->scale, 3.0f / 6);
  EXPECT_FLOAT_EQ(a->pair(1, LoraTarget::kV)->scale, 8.0f / 2);
  EXPECT_EQ(a->max_rank, 6);
  // A rank the pattern does not give is refused.
  c["rank_pattern"] = Json::object();
  std::ofstream(dir + "/adapter_config.json") << c.dump();
  expect_error(dir, ErrorCode::kCorrupt, {"rank 6", "r = 4"});
}

}  // namespace
}  // namespace kvlm
