// LoRA adapters in the engine: one step serves the base and several adapters
// together, each sequence getting exactly what it gets alone, and the prefix
// cache never hands one adapter's KV to another (or to the base).
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "engine/engine.h"
#include "engine/spec/speculative.h"
#include "kv/block_hash.h"
#include "model/model.h"
#include "support/engine_support.h"
#include "support/lora_fixture.h"
#include "support/test_support.h"
#include "tokenizer/tokenizer.h"

namespace kvlm::lora_engine_test {

// synth-tiny (dim 256, 4 layers, FFN 768): wide enough that a random adapter
// changes greedy tokens, which the tests check so that an ignored adapter fails.
constexpr const char* kModel = "models/synth-tiny-F32.gguf";

std::unique_ptr<Engine> make_engine(EngineConfig config = {}) {
  auto model = Model::load(test::shared_path(kModel));
  auto tok = Tokenizer::from_metadata(model->gguf().metadata());
  return std::make_unique<Engine>(std::move(model), std::move(tok), config);
}

struct Result {
  std::vector<int32_t> tokens;
  RequestStats stats;
};

Result drain(RequestStream& s) {
  Result r;
  while (auto ev = s.next()) {
    r.tokens.insert(r.tokens.end(), ev->tokens.begin(), ev->tokens.end());
    if (ev->error) ADD_FAILURE() << "request failed: " << ev->error->what();
  }
  r.stats = s.stats();
  return r;
}

GenerateRequest greedy(std::vector<int32_t> prompt, std::shared_ptr<const LoraAdapter> lora, int32_t max_tokens = 24) {
  GenerateRequest g;
  g.prompt_tokens = std::move(prompt);
  g.max_tokens = max_tokens;
  g.sampling.temperature = 0.f;
  g.ignore_eos = true;
  g.lora = std::move(lora);
  return g;
}

std::vector<int32_t> random_prompt(std::mt19937& rng, int n) {
  std::vector<int32_t> p = {1};
  while (static_cast<int>(p.size()) < n) p.push_back(3 + static_cast<int32_t>(rng() % 509));
  return p;
}

using test::expect_pool_whole;

TEST(LoraEngine, MixedBatchGivesEachSequenceWhatItGetsAlone) {
  auto engine = make_engine();
  const Model& m = engine->model();
  const std::shared_ptr<const LoraAdapter> adapters[] = {
      nullptr,
      test::random_lora(m, 8, test::llama_attention_targets(), 1, 0.5f, 0.2f),
      test::random_lora(m, 16, test::llama_all_targets(), 2, 0.5f, 0.2f),
      test::random_lora(m, 4, test::llama_all_targets(), 3, 1.0f, 0.2f)};
  std::mt19937 rng(7);
  const std::vector<int32_t> shared = random_prompt(rng, 37);
  std::vector<GenerateRequest> requests;
  for (int k = 0; k < 2; ++k)
    for (const auto& a : adapters) requests.push_back(greedy(k == 0 ? shared : random_prompt(rng, 5 + k * 20), a));

  std::vector<Result> alone;
  for (const GenerateRequest& g : requests) alone.push_back(drain(*engine->submit(g)));
  // Every adapter changes the shared prompt's continuation: an adapter the
  // forward pass ignored, or applied to another sequence's rows, fails below.
  for (size_t a = 1; a < std::size(adapters); ++a)
    EXPECT_NE(alone[a].tokens, alone[0].tokens) << "adapter " << a << " left the base's output unchanged";

  auto streams = engine->submit_batch(requests, 1);
  ASSERT_EQ(streams.size(), requests.size());
  for (size_t i = 0; i < streams.size(); ++i)
    EXPECT_EQ(drain(*streams[i]).tokens, alone[i].tokens) << "request " << i << " batched differs from alone";
  expect_pool_whole(*engine);
}

TEST(LoraEngine, PromptCachedUnderOneAdapterIsAMissUnderAnother) {
  auto engine = make_engine();
  const Model& m = engine->model();
  auto a = test::random_lora(m, 8, test::llama_all_targets(), 11);
  auto b = test::random_lora(m, 8, test::llama_all_targets(), 12);
  auto a_again = test::random_lora(m, 8, test::llama_all_targets(), 11);  // equal content, another object
  std::mt19937 rng(3);
  const std::vector<int32_t> prompt = random_prompt(rng, 70);
  auto cached = [&](std::shared_ptr<const LoraAdapter> lora, const std::string& salt = "") {
    GenerateRequest g = greedy(prompt, std::move(lora), 2);
    if (!salt.empty()) g.cache_salt = cache_salt_key(salt);
    return drain(*engine->submit(g)).stats.num_cached_tokens;
  };
  EXPECT_EQ(cached(a), 0);
  EXPECT_GT(cached(a), 0) << "the same adapter finds its own blocks";
  EXPECT_EQ(cached(b), 0) << "adapter B must not reuse adapter A's KV";
  EXPECT_EQ(cached(nullptr), 0) << "the base must not reuse an adapter's KV";
  EXPECT_EQ(cached(a, "tenant"), 0) << "a salted request of A must not reuse A's unsalted KV";
  EXPECT_GT(cached(a_again), 0) << "an identical adapter loaded again shares the blocks";
  EXPECT_GT(cached(nullptr), 0);
  expect_pool_whole(*engine);
}

// Speculative decoding (n-gram proposals, verified with the adapter) and a
// KV budget change nothing an adapter's greedy output would not change
// without them: the same tokens as plain decoding with the adapter.
TEST(LoraEngine, SpeculationAndKvBudgetsKeepTheAdaptersOutput) {
  auto plain = make_engine();
  auto lora = test::random_lora(plain->model(), 8, test::llama_all_targets(), 21, 0.5f, 0.2f);
  // A repetitive prompt, so the n-gram proposer proposes (and some proposals are right).
  std::vector<int32_t> prompt = {1};
  for (int r = 0; r < 6; ++r)
    for (int32_t t : {40, 41, 42, 43, 44, 45, 46}) prompt.push_back(t);
  const Result want = drain(*plain->submit(greedy(prompt, lora, 48)));
  EXPECT_NE(want.tokens, drain(*plain->submit(greedy(prompt, nullptr, 48))).tokens);

  EngineConfig spec;
  spec.speculative.mode = SpeculateMode::kNgram;
  spec.speculative.num_spec_tokens = 4;
  auto speculating = make_engine(spec);
  const auto lora_there = test::random_lora(speculating->model(), 8, test::llama_all_targets(), 21, 0.5f, 0.2f);
  EXPECT_EQ(drain(*speculating->submit(greedy(prompt, lora_there, 48))).tokens, want.tokens);
  expect_pool_whole(*speculating);
  EXPECT_GT(speculating->metrics().num_spec_accepted, 0) << "no proposal was accepted: the check above tested nothing";

  // A budget larger than the sequence evicts nothing: the same tokens.
  GenerateRequest budgeted = greedy(prompt, lora, 48);
  KvBudget b;
  b.budget_tokens = 512;
  budgeted.kv_budget = b;
  EXPECT_EQ(drain(*plain->submit(budgeted)).tokens, want.tokens);
  expect_pool_whole(*plain);
}

}  // namespace kvlm::lora_engine_test
