// A model runs its whole forward pass on the backend it was loaded with
// (ModelLoadOptions::backend): a backend that counts its calls and hands
// them to the default one sees every op of the interface used by some
// family, each layer's attention once, and logits bit for bit the default's.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "common/huge_pages.h"
#include "model/make_model.h"
#include "model/model.h"
#include "support/lora_fixture.h"
#include "support/test_support.h"

namespace kvlm {
namespace {

enum Op {
  kPrepare, kGetRow, kMatmul, kMatmulMany, kMatmulGrouped, kRmsNorm, kLayerNorm, kRope, kSoftmax, kSwiglu,
  kGeglu, kGelu, kSoftCap, kAddInplace, kAddBias, kScale, kKvWrite, kKvDeviation, kAttention, kNumOps
};

class CountingBackend final : public Backend {
 public:
  mutable std::array<int, kNumOps> calls{};

  WeightMatrix prepare_matrix(WeightMatrix w) const override {
    ++calls[kPrepare];
    return base_.prepare_matrix(std::move(w));
  }
  void get_row(const WeightMatrix& w, int64_t row, float* out) const override {
    ++calls[kGetRow];
    base_.get_row(w, row, out);
  }
  void matmul(const WeightMatrix& w, const float* x, int64_t n, float* y) const override {
    ++calls[kMatmul];
    base_.matmul(w, x, n, y);
  }
  void matmul_many(std::span<const MatmulJob> jobs, const float* x, int64_t n) const override {
    ++calls[kMatmulMany];
    base_.matmul_many(jobs, x, n);
  }
  void matmul_grouped(std::span<const GroupedMatmulJob> jobs) const override {
    ++calls[kMatmulGrouped];
    base_.matmul_grouped(jobs);
  }
  void rms_norm(const float* x, const float* w, float* y, int64_t r, int64_t n, float eps) const override {
    ++calls[kRmsNorm];
    base_.rms_norm(x, w, y, r, n, eps);
  }
  void layer_norm(const float* x, const float* w, const float* b, float* y, int64_t r, int64_t n,
                  float eps) const override {
    ++calls[kLayerNorm];
    base_.layer_norm(x, w, b, y, r, n, eps);
  }
  void rope(float* x, const int32_t* pos, int64_t t, int64_t h, int64_t d, const RopeParams& p) const override {
    ++calls[kRope];
    base_.rope(x, pos, t, h, d, p);
  }
  void softmax(float* x, int64_t r, int64_t n) const override {
    ++calls[kSoftmax];
    base_.softmax(x, r, n);
  }
  void swiglu(const float* g, const float* u, float* out, int64_t n) const override {
    ++calls[kSwiglu];
    base_.swiglu(g, u, out, n);
  }
  void geglu(const float* g, const float* u, float* out, int64_t n) const override {
    ++calls[kGeglu];
    base_.geglu(g, u, out, n);
  }
  void gelu(float* x, int64_t n) const override {
    ++calls[kGelu];
    base_.gelu(x, n);
  }
  void soft_cap(float* x, int64_t n, float cap) const override {
    ++calls[kSoftCap];
    base_.soft_cap(x, n, cap);
  }
  void add_inplace(float* y, const float* x, int64_t n) const override {
    ++calls[kAddInplace];
    base_.add_inplace(y, x, n);
  }
  void add_bias(float* y, const float* b, int64_t r, int64_t n) const override {
    ++calls[kAddBias];
    base_.add_bias(y, b, r, n);
  }
  void scale_inplace(float* x, int64_t n, float s) const override {
    ++calls[kScale];
    base_.scale_inplace(x, n, s);
  }
  void kv_write(const KvLayout& layout, const KvLayer& layer, const float* k, const float* v, const int64_t* slots,
                int64_t n) const override {
    ++calls[kKvWrite];
    base_.kv_write(layout, layer, k, v, slots, n);
  }
  void kv_deviation(const KvLayout& layout, const KvLayer& layer, const float* k, const float* v,
                    const int64_t* slots, int64_t n, float* out) const override {
    ++calls[kKvDeviation];
    base_.kv_deviation(layout, layer, k, v, slots, n, out);
  }
  void paged_attention(const KvLayout& layout, const KvLayer& layer, const float* q,
                       std::span<const AttentionSeq> seqs, const AttentionParams& params,
                       float* out) const override {
    ++calls[kAttention];
    base_.paged_attention(layout, layer, q, seqs, params, out);
  }

 private:
  const Backend& base_ = default_backend();
};

// The logits of the last of `tokens`, fed at once as one new sequence whose
// F16 KV lives in blocks 0, 1, ... of a fresh pool.
// probe_layers > 0: a KV chunks probe of that many layers instead, whose
// per-row KV deviations (against the zeroed cache) are returned.
std::vector<float> last_logits(const Model& model, const std::vector<int32_t>& tokens,
                               const LoraAdapter* lora = nullptr, int32_t probe_layers = 0) {
  const ModelConfig& c = model.config();
  const auto T = static_cast<int32_t>(tokens.size());
  KvCacheView kv;
  kv.layout = KvLayout{DType::kF16, 16, c.num_kv_heads, c.head_dim};
  const int32_t num_blocks = (T + kv.layout.block_size - 1) / kv.layout.block_size;
  const size_t half = kv.layout.block_bytes() * num_blocks;  // one layer's K (or V)
  HugePageBuffer pool(2 * half * c.num_layers, "test KV");
  for (int32_t l = 0; l < c.num_layers; ++l)
    kv.layers.push_back(KvLayer{pool.data() + 2 * l * half, pool.data() + (2 * l + 1) * half});
  const std::vector<KvGroupSpec> specs = model.kv_groups();
  kv.layer_group.resize(c.num_layers);
  for (size_t g = 0; g < specs.size(); ++g)
    for (int32_t l : specs[g].layers) kv.layer_group[l] = static_cast<int32_t>(g);

  std::vector<int32_t> positions(T), table(num_blocks);
  std::vector<int64_t> slots(T);
  std::iota(positions.begin(), positions.end(), 0);
  std::iota(slots.begin(), slots.end(), 0);
  std::iota(table.begin(), table.end(), 0);
  const AttentionSeq seq{0, T, T, table};
  const std::vector<KvGroupBatch> groups(specs.size(), KvGroupBatch{slots, std::span(&seq, 1)});
  const int32_t last = T - 1;
  ForwardBatch batch;
  batch.tokens = tokens;
  batch.positions = positions;
  batch.groups = groups;
  batch.logit_rows = std::span(&last, 1);
  std::vector<int32_t> rows(T);
  std::iota(rows.begin(), rows.end(), 0);
  const LoraRows adapter_rows{lora, rows};
  if (lora) batch.lora = std::span(&adapter_rows, 1);
  ForwardScratch scratch;
  std::vector<float> logits(c.vocab_size), deviation(static_cast<size_t>(T));
  if (probe_layers > 0) {
    batch.logit_rows = {};
    batch.num_layers = probe_layers;
    batch.kv_deviation = deviation;
  }
  model.forward(batch, kv, scratch, logits.data());
  return probe_layers > 0 ? deviation : logits;
}

// A Qwen2-MoE of random weights: experts (router softmax, SwiGLU) and a shared expert.
std::string moe_model() {
  MakeModelOptions o;
  o.shape.arch = "qwen2moe";
  o.shape.dim = 64;
  o.shape.num_layers = 2;
  o.shape.num_heads = 4;
  o.shape.num_kv_heads = 2;
  o.shape.ffn_dim = 64;
  o.shape.context_length = 256;
  o.shape.num_experts = 4;
  o.shape.num_experts_used = 2;
  o.shape.expert_ffn_dim = 32;
  o.shape.shared_expert_ffn_dim = 64;
  o.type = DType::kQ8_0;
  o.weight_std = 0.3f;
  o.vocab_from = test::shared_path("models/stories260K.gguf");
  o.out_path = test::temp_dir() + "/backend-seam-qwen2moe.gguf";
  make_model(o, [](const std::string&) {});
  return o.out_path;
}

TEST(BackendSeam, EveryFamilyRunsOnTheBackendItWasLoadedWith) {
  const std::vector<std::string> paths = {
      test::shared_path("models/stories260K.gguf"), test::shared_path("models/synth-qwen2-F32.gguf"),
      test::shared_path("models/synth-gpt2-F16.gguf"), test::shared_path("models/synth-gemma2-F32.gguf"),
      moe_model()};
  const std::vector<int32_t> tokens = {1, 5, 9, 20, 7, 3, 11, 2, 40, 8};
  std::array<int, kNumOps> used{};
  for (const std::string& path : paths) {
    SCOPED_TRACE(path);
    CountingBackend counting;
    ModelLoadOptions options;
    options.backend = &counting;
    const auto model = Model::load(path, options);
    EXPECT_GT(counting.calls[kPrepare], 0) << "the loader prepares the matrices on the given backend";
    const auto reference = Model::load(path);
    counting.calls = {};
    const std::vector<float> got = last_logits(*model, tokens);
    const std::vector<float> want = last_logits(*reference, tokens);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
    const int32_t num_layers = model->config().num_layers;
    EXPECT_EQ(counting.calls[kKvWrite], num_layers);
    EXPECT_EQ(counting.calls[kAttention], num_layers);
    EXPECT_GE(counting.calls[kGetRow], static_cast<int>(tokens.size()));
    for (int op = 0; op < kNumOps; ++op) used[op] += counting.calls[op];
    if (model->config().arch_name != "llama") continue;
    // A KV chunks probe (ForwardBatch::num_layers) on the same backend.
    counting.calls = {};
    const std::vector<float> probe = last_logits(*model, tokens, nullptr, 2);
    EXPECT_EQ(probe, last_logits(*reference, tokens, nullptr, 2));
    EXPECT_GT(probe[0], 0.f);
    EXPECT_EQ(counting.calls[kKvDeviation], 1);
    EXPECT_EQ(counting.calls[kKvWrite], 2);
    EXPECT_EQ(counting.calls[kAttention], 1) << "the probe's last layer writes its K/V and stops";
    for (int op = 0; op < kNumOps; ++op) used[op] += counting.calls[op];
    // With a LoRA adapter (prepared on the model's backend) too.
    counting.calls = {};
    const auto lora = test::random_lora(*model, 4, test::llama_all_targets(), 9);
    const auto reference_lora = test::random_lora(*reference, 4, test::llama_all_targets(), 9);
    const std::vector<float> got_lora = last_logits(*model, tokens, lora.get());
    const std::vector<float> want_lora = last_logits(*reference, tokens, reference_lora.get());
    EXPECT_EQ(std::memcmp(got_lora.data(), want_lora.data(), got_lora.size() * sizeof(float)), 0);
    EXPECT_NE(std::memcmp(got_lora.data(), got.data(), got.size() * sizeof(float)), 0) << "the adapter changed nothing";
    for (int op = 0; op < kNumOps; ++op) used[op] += counting.calls[op];
  }
  // Prepare was counted at load, before the reset; every other op of the
  // interface serves some family, so none is dead weight in a new backend.
  for (int op = kGetRow; op < kNumOps; ++op) EXPECT_GT(used[op], 0) << "op " << op << " never called";
}

}  // namespace
}  // namespace kvlm
