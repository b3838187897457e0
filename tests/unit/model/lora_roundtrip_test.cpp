// make-lora's files read back by load_lora: in both formats, on a llama, a
// GPT-2 and a Hugging Face llama folder, every pair's A and B equal what
// the file holds (B of q/k in GGUF's row order for a PEFT adapter of a
// llama), the scale follows alpha / r, rsLoRA and the user's scale, and the
// identity follows the content.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>

#include <fmt/format.h>

#include "backend/backend.h"
#include "model/hf_checkpoint.h"
#include "model/lora_load.h"
#include "model/make_lora.h"
#include "model/safetensors.h"
#include "support/hf_folder.h"
#include "unit/model/lora_test_support.h"

namespace kvlm {
namespace {

using test::LoraBase;

// The HF module of a target, written here apart from make_lora's table.
std::string module_of(const ModelConfig& c, int64_t layer, LoraTarget t) {
  static const char* kLlama[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "",
                                 "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};
  static const char* kGpt2[] = {"", "", "", "attn.c_attn", "attn.c_proj", "", "mlp.c_fc", "mlp.c_proj"};
  const auto i = static_cast<size_t>(t);
  return c.arch == Arch::kGpt2 ? fmt::format("transformer.h.{}.{}", layer, kGpt2[i])
                               : fmt::format("model.layers.{}.{}", layer, kLlama[i]);
}

// (A, B) of one pair as the file stores them, row-major.
std::pair<std::vector<float>, std::vector<float>> file_pair(const std::string& out, LoraFormat format,
                                                             const ModelConfig& c, int64_t layer, LoraTarget t) {
  if (format == LoraFormat::kGguf) {
    auto f = GgufFile::open(out);
    const std::string name = fmt::format("blk.{}.{}.weight", layer, lora_target_gguf_name(t));
    const GgufTensor& a = f->require_tensor(name + ".lora_a");
    const GgufTensor& b = f->require_tensor(name + ".lora_b");
    return {test::floats_of(a.dtype, a.data, a.num_elements()), test::floats_of(b.dtype, b.data, b.num_elements())};
  }
  auto f = SafetensorsFile::open(out + "/adapter_model.safetensors");
  const std::string m = "base_model.model." + module_of(c, layer, t);
  const SafetensorsTensor* a = f->find(m + ".lora_A.weight");
  const SafetensorsTensor* b = f->find(m + ".lora_B.weight");
  EXPECT_TRUE(a && b) << m;
  if (!a || !b) return {};
  return {test::floats_of(a->dtype, a->data, a->num_elements()), test::floats_of(b->dtype, b->data, b->num_elements())};
}

// Every pair of `adapter` against the file, the scale `scale` everywhere.
void expect_matches_file(const LoraAdapter& adapter, const std::string& out, LoraFormat format, const LoraBase& base,
                         const std::vector<LoraTarget>& targets, int32_t rank, float scale) {
  EXPECT_EQ(adapter.max_rank, rank);
  EXPECT_EQ(adapter.targets(), targets);
  ASSERT_EQ(adapter.layers.size(), static_cast<size_t>(base.config.num_layers));
  for (int32_t l = 0; l < base.config.num_layers; ++l) {
    for (LoraTarget t : targets) {
      const LoraPair* p = adapter.pair(l, t);
      ASSERT_NE(p, nullptr) << l << " " << lora_target_gguf_name(t);
      const GgufTensor& w = base.file->require_tensor(fmt::format("blk.{}.{}.weight", l, lora_target_gguf_name(t)));
      EXPECT_EQ(p->a.rows, rank);
      EXPECT_EQ(p->a.cols, w.dims[0]);
      EXPECT_EQ(p->b.rows, w.dims[1]);
      EXPECT_EQ(p->b.cols, rank);
      EXPECT_FLOAT_EQ(p->scale, scale);
      auto [a, b] = file_pair(out, format, base.config, l, t);
      const bool qk = t == LoraTarget::kQ || t == LoraTarget::kK;
      if (format == LoraFormat::kPeft && base.config.arch_name == "llama" && qk)
        b = test::hf_rows_to_gguf(b, p->b.rows, rank, t == LoraTarget::kQ ? base.config.num_heads
                                                                           : base.config.num_kv_heads);
      EXPECT_EQ(test::floats_of(p->a), a) << l << " " << lora_target_gguf_name(t);
      EXPECT_EQ(test::floats_of(p->b), b) << l << " " << lora_target_gguf_name(t);
    }
  }
}

struct RoundTripCase {
  const char* model;
  LoraFormat format;
  DType dtype;
  const char* targets;
};

class LoraRoundTrip : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(LoraRoundTrip, LoadsWhatMakeLoraWrote) {
  const RoundTripCase& c = GetParam();
  const LoraBase base = test::shared_lora_base(c.model);
  MakeLoraOptions o;
  o.base_path = test::shared_path(c.model);
  o.out_path = test::temp_path(fmt::format("rt-{}-{}-{}-{}", base.config.arch_name, static_cast<int>(c.format),
                                           dtype_name(c.dtype), c.targets));
  o.format = c.format;
  o.rank = 8;
  o.alpha = 16;
  o.targets = c.targets;
  o.dtype = c.dtype;
  o.seed = 11;
  const MakeLoraResult r = make_lora(o);
  const std::vector<LoraTarget> targets = parse_lora_targets(c.targets, base.config);
  EXPECT_EQ(r.num_pairs, static_cast<int64_t>(targets.size()) * base.config.num_layers);
  const auto adapter = load_lora(o.out_path, *base.file, base.config, default_backend());
  expect_matches_file(*adapter, o.out_path, c.format, base, targets, 8, 2.0f);
  EXPECT_GT(adapter->num_bytes, 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Files, LoraRoundTrip,
    ::testing::Values(RoundTripCase{"models/synth-tiny-F32.gguf", LoraFormat::kPeft, DType::kF32, "all"},
                      RoundTripCase{"models/synth-tiny-F32.gguf", LoraFormat::kGguf, DType::kF32, "all"},
                      RoundTripCase{"models/synth-tiny-F32.gguf", LoraFormat::kPeft, DType::kBF16, "attn"},
                      RoundTripCase{"models/synth-tiny-F32.gguf", LoraFormat::kGguf, DType::kF16, "attn_k,ffn_gate"},
                      RoundTripCase{"models/synth-gpt2-F16.gguf", LoraFormat::kPeft, DType::kF16, "all"},
                      RoundTripCase{"models/synth-gpt2-F16.gguf", LoraFormat::kGguf, DType::kF32, "attn"},
                      // Not llama: PEFT's q/k rows stay as they are.
                      RoundTripCase{"models/synth-qwen2-F32.gguf", LoraFormat::kPeft, DType::kF32, "all"},
                      RoundTripCase{"models/synth-gemma2-F32.gguf", LoraFormat::kPeft, DType::kF32, "all"},
                      RoundTripCase{"models/synth-gemma2-F32.gguf", LoraFormat::kGguf, DType::kBF16, "attn_q,ffn_gate"}),
    [](const ::testing::TestParamInfo<RoundTripCase>& info) {
      std::string name = fmt::format("{}_{}_{}_{}", info.index, info.param.format == LoraFormat::kPeft ? "peft" : "gguf",
                                     dtype_name(info.param.dtype), info.param.targets);
      for (char& ch : name)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return name;
    });

MakeLoraOptions tiny_options(LoraFormat format, const std::string& name) {
  MakeLoraOptions o;
  o.base_path = test::shared_path("models/synth-tiny-F32.gguf");
  o.out_path = test::temp_path(name);
  o.format = format;
  o.rank = 16;
  o.alpha = 32;
  o.seed = 3;
  return o;
}

TEST(LoraScale, AlphaOverRankRsloraAndTheUserScale) {
  const LoraBase base = test::shared_lora_base("models/synth-tiny-F32.gguf");
  for (LoraFormat format : {LoraFormat::kPeft, LoraFormat::kGguf}) {
    MakeLoraOptions o = tiny_options(format, fmt::format("scale-{}", static_cast<int>(format)));
    make_lora(o);
    const auto plain = load_lora(o.out_path, *base.file, base.config, default_backend());
    EXPECT_FLOAT_EQ(plain->pair(0, LoraTarget::kQ)->scale, 2.0f);  // 32 / 16
    const auto half = load_lora(o.out_path, *base.file, base.config, default_backend(), 0.5f);
    EXPECT_FLOAT_EQ(half->pair(1, LoraTarget::kV)->scale, 1.0f);
    o.rslora = true;
    o.out_path += "-rs";
    make_lora(o);
    const auto rs = load_lora(o.out_path, *base.file, base.config, default_backend(), 0.5f);
    EXPECT_FLOAT_EQ(rs->pair(0, LoraTarget::kOut)->scale, 0.5f * 32.0f / 4.0f);  // alpha / sqrt(16)
  }
}

TEST(LoraIdentity, FollowsTheContentAndTheScale) {
  const LoraBase base = test::shared_lora_base("models/synth-tiny-F32.gguf");
  MakeLoraOptions o = tiny_options(LoraFormat::kPeft, "id-peft");
  make_lora(o);
  const Hash128 first = load_lora(o.out_path, *base.file, base.config, default_backend())->identity;
  EXPECT_EQ(load_lora(o.out_path, *base.file, base.config, default_backend())->identity, first);
  EXPECT_NE(load_lora(o.out_path, *base.file, base.config, default_backend(), 0.5f)->identity, first);
  // The same pairs in llama.cpp's format: the same adapter once loaded.
  MakeLoraOptions g = tiny_options(LoraFormat::kGguf, "id.gguf");
  make_lora(g);
  EXPECT_EQ(load_lora(g.out_path, *base.file, base.config, default_backend())->identity, first);
  o.seed = 4;
  o.out_path = test::temp_path("id-peft-seed4");
  make_lora(o);
  EXPECT_NE(load_lora(o.out_path, *base.file, base.config, default_backend())->identity, first);
}

// A PEFT adapter of a Hugging Face llama folder: its q/k lora_B rows are in
// HF's order, as the folder's q_proj/k_proj are, and load in GGUF's order.
TEST(LoraHfFolder, PeftAdapterFollowsTheQkPermutation) {
  const LoraBase gguf = test::shared_lora_base("models/synth-tiny-F32.gguf");
  const std::string dir = test::temp_path("lora-hf-llama");
  test::write_hf_folder(*gguf.file, dir);
  // The test's permutation agrees with the folder writer's (independent) one.
  auto st = SafetensorsFile::open(dir + "/model.safetensors");
  const SafetensorsTensor* q_hf = st->find("model.layers.0.self_attn.q_proj.weight");
  ASSERT_NE(q_hf, nullptr);
  const GgufTensor& q = gguf.file->require_tensor("blk.0.attn_q.weight");
  EXPECT_EQ(test::hf_rows_to_gguf(test::floats_of(q_hf->dtype, q_hf->data, q_hf->num_elements()), q.dims[1],
                                  q.dims[0], gguf.config.num_heads),
            test::floats_of(q.dtype, q.data, q.num_elements()));

  const LoraBase folder = test::lora_base(open_model_file(dir));
  MakeLoraOptions o = tiny_options(LoraFormat::kPeft, "lora-on-hf-folder");
  o.base_path = dir;
  o.targets = "attn";
  make_lora(o);
  const auto adapter = load_lora(o.out_path, *folder.file, folder.config, default_backend());
  expect_matches_file(*adapter, o.out_path, LoraFormat::kPeft, folder, parse_lora_targets("attn", folder.config), 16,
                      2.0f);
  // The folder and its GGUF are one model in GGUF's layout: one adapter on both.
  EXPECT_EQ(load_lora(o.out_path, *gguf.file, gguf.config, default_backend())->identity, adapter->identity);
}

}  // namespace
}  // namespace kvlm
