// The scheduler and model runner together, without the engine thread: several
// sequences teacher-forced through one batched forward pass per step must
// produce the logits of a single-sequence run, for every architecture —
// including Gemma-2 and Phi-3 with their sliding-window blocks going back to
// the pool, and the MoE families with their tokens grouped by expert.
#include <gtest/gtest.h>

#include <cctype>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "model/make_model.h"
#include "model/model.h"
#include "runner/model_runner.h"
#include "runner/sequence_evaluator.h"
#include "sched/scheduler.h"
#include "support/test_support.h"

namespace kvlm {
namespace {

std::vector<int32_t> golden_tokens(const std::string& name) {
  std::ifstream f(test::shared_path("golden/" + name + ".logits.json"));
  auto j = nlohmann::json::parse(f);
  return j["tokens"].get<std::vector<int32_t>>();
}

double nmse(std::span<const float> got, std::span<const float> ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (got[i] - ref[i]) * static_cast<double>(got[i] - ref[i]);
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return num / den;
}

struct BatchedRun {
  // logits[request][k]: the row after the request's token k (k >= prompt - 1).
  std::map<int64_t, std::vector<std::vector<float>>> logits;
  int32_t max_window_blocks_held = 0;  // most live blocks a window-group table held in a decode step
  int32_t num_multi_seq_steps = 0;
  bool pool_whole = false;
};

// Teacher forcing through the scheduler: request r's prompt is the first
// prompt_lens[r] tokens; each "sampled" token is the next token of the list.
BatchedRun run_batched(const Model& model, const std::vector<int32_t>& tokens, const std::vector<int32_t>& prompt_lens,
                int32_t block_size, int32_t budget) {
  const auto groups = model.kv_groups();
  KvCacheConfig kc;
  kc.block_size = block_size;
  kc.num_blocks = 256;
  kc.enable_prefix_caching = false;
  kc.group_windows.clear();
  for (const auto& g : groups) kc.group_windows.push_back(g.window);
  Scheduler sched(SchedulerConfig{budget, 16, 1024}, kc);
  ModelRunner runner(model, DType::kF16, block_size, kc.num_blocks);
  const int32_t num_tokens = static_cast<int32_t>(tokens.size());
  for (size_t r = 0; r < prompt_lens.size(); ++r) {
    auto req = std::make_unique<Request>();
    req->id = RequestId(static_cast<int64_t>(r));
    req->tokens.assign(tokens.begin(), tokens.begin() + prompt_lens[r]);
    req->num_prompt_tokens = prompt_lens[r];
    req->max_tokens = num_tokens - prompt_lens[r];
    sched.add_request(std::move(req));
  }
  BatchedRun run;
  const size_t vocab = static_cast<size_t>(model.config().vocab_size);
  while (sched.has_unfinished()) {
    SchedulerOutput out = sched.schedule();
    if (out.seqs.size() > 1) ++run.num_multi_seq_steps;
    std::span<const float> logits = runner.execute(out);
    std::vector<int32_t> sampled;
    size_t row = 0;
    for (const auto& s : out.seqs) {
      if (!s.sample) continue;
      auto& rows = run.logits[s.id.value()];
      rows.emplace_back(logits.begin() + row * vocab, logits.begin() + (row + 1) * vocab);
      const int32_t next = s.num_computed + static_cast<int32_t>(s.new_tokens.size());
      sampled.push_back(tokens[std::min(next, num_tokens - 1)]);
      ++row;
      for (size_t g = 0; g < groups.size() && s.new_tokens.size() == 1; ++g) {
        if (groups[g].window == 0) continue;
        const BlockTable& t = sched.kv().table(s.id, static_cast<int32_t>(g));
        run.max_window_blocks_held = std::max(
            run.max_window_blocks_held, static_cast<int32_t>(t.size()) - t.num_released);
      }
    }
    sched.update(out, sampled);
  }
  run.pool_whole = sched.kv().pool().num_free_blocks() == kc.num_blocks;
  return run;
}

class RunnerBatching : public ::testing::TestWithParam<const char*> {};

// The families without a shared model are made here: tiny, random, sharp
// (Phi-3 with a window of 8 tokens and long-rope factors; Qwen3's head norms;
// Mixtral's and Qwen2-MoE's experts, routed differently token by token).
std::string made_model(const std::string& arch) {
  MakeModelOptions o;
  o.shape.arch = arch;
  o.shape.dim = 64;
  o.shape.num_layers = 2;
  o.shape.num_heads = 4;
  o.shape.num_kv_heads = 2;
  o.shape.ffn_dim = 64;
  o.shape.context_length = 256;
  if (arch == "phi3") {
    o.shape.sliding_window = 8;
    o.shape.rope_scaling.type = "longrope";
    o.shape.rope_scaling.original_context = 64;
  }
  if (arch == "qwen3") o.shape.head_dim = 32;
  if (arch == "llama" || arch == "qwen2moe") {
    o.shape.num_experts = 4;
    o.shape.num_experts_used = 2;
  }
  if (arch == "qwen2moe") {
    o.shape.expert_ffn_dim = 32;
    o.shape.shared_expert_ffn_dim = 48;
  }
  o.type = DType::kF32;
  o.weight_std = 0.3f;
  o.vocab_from = test::shared_path("models/stories260K.gguf");
  o.out_path = test::temp_dir() + "/runner-" + arch + ".gguf";
  make_model(o, [](const std::string&) {});
  return o.out_path;
}

TEST_P(RunnerBatching, BatchedEqualsSingleSequence) {
  const std::string name = GetParam();
  const bool made = name.rfind("make:", 0) == 0;
  auto model = Model::load(made ? made_model(name.substr(5)) : test::shared_path("models/" + name + ".gguf"));
  std::vector<int32_t> tokens = golden_tokens(made ? "synth-gemma2-F32" : name);
  const int32_t n = static_cast<int32_t>(tokens.size());

  // Reference: one sequence, every row of one forward pass.
  SequenceEvaluator eval(*model, n);
  std::vector<float> single = eval.eval(tokens, /*all_logits=*/true);
  const size_t vocab = static_cast<size_t>(model->config().vocab_size);

  // Four requests with different prompt lengths share every step; a small
  // budget forces chunked prefills beside decodes.
  std::vector<int32_t> prompt_lens = {1, 3, n / 2, n - 2};
  BatchedRun run = run_batched(*model, tokens, prompt_lens, /*block_size=*/4, /*budget=*/7);
  EXPECT_GT(run.num_multi_seq_steps, 3);
  EXPECT_TRUE(run.pool_whole);
  for (size_t r = 0; r < prompt_lens.size(); ++r) {
    const auto& rows = run.logits[static_cast<int64_t>(r)];
    ASSERT_EQ(static_cast<int32_t>(rows.size()), n - prompt_lens[r]) << "request " << r;
    for (size_t k = 0; k < rows.size(); ++k) {
      const size_t pos = prompt_lens[r] - 1 + k;
      std::span<const float> ref(&single[pos * vocab], vocab);
      // Bit-for-bit: matmuls are batch-invariant and attention sums each
      // query's visible slots in order whatever the chunking.
      EXPECT_EQ(nmse(rows[k], ref), 0.0) << name << " request " << r << " position " << pos;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllArchitectures, RunnerBatching,
                         ::testing::Values("synth-tiny-F32", "synth-tiny-Q4_K", "synth-qwen2-F32",
                                           "synth-gpt2-F16", "synth-gemma2-F32", "make:phi3", "make:qwen3",
                                           "make:llama", "make:qwen2moe"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

TEST(Gemma2Window, SlidingLayersHoldOnlyTheWindow) {
  auto model = Model::load(test::shared_path("models/synth-gemma2-F32.gguf"));
  const int32_t window = model->config().sliding_window;
  ASSERT_EQ(window, 8);
  // A long sequence: the golden tokens repeated up to 200 tokens, decoded one
  // at a time after a 40-token prompt.
  std::vector<int32_t> base = golden_tokens("synth-gemma2-F32");
  std::vector<int32_t> tokens;
  while (tokens.size() < 200) tokens.insert(tokens.end(), base.begin(), base.end());
  tokens.resize(200);
  const int32_t block_size = 4;
  BatchedRun run = run_batched(*model, tokens, {40}, block_size, /*budget=*/16);
  // A decode at slot s sees slots (s - 8, s]: at most 3 blocks of 4.
  EXPECT_LE(run.max_window_blocks_held, window / block_size + 1);
  EXPECT_GE(run.max_window_blocks_held, window / block_size);
  EXPECT_TRUE(run.pool_whole);

  // And the logits still equal a single-sequence run that keeps every block.
  SequenceEvaluator eval(*model, 200);
  std::vector<float> single = eval.eval(tokens, true);
  const size_t vocab = static_cast<size_t>(model->config().vocab_size);
  const auto& rows = run.logits[0];
  ASSERT_EQ(rows.size(), 160u);
  for (size_t k = 0; k < rows.size(); ++k)
    EXPECT_EQ(nmse(rows[k], std::span<const float>(&single[(39 + k) * vocab], vocab)), 0.0) << "position " << 39 + k;
}

}  // namespace
}  // namespace kvlm
