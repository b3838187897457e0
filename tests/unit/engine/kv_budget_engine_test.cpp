// KV budgets through the engine on stories260K: with every policy, a token's
// log-probability is bit-identical however its sequence was chunked, batched
// or preempted, memory stays within budget + one block, and the pool is whole
// after.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "engine/engine.h"
#include "model/model.h"
#include "support/engine_support.h"
#include "support/test_support.h"
#include "tokenizer/tokenizer.h"

namespace kvlm::kv_budget_engine_test {

std::unique_ptr<Engine> make_engine(EngineConfig config) {
  auto model = Model::load(test::shared_path("models/stories260K.gguf"));
  auto tok = Tokenizer::from_metadata(model->gguf().metadata());
  return std::make_unique<Engine>(std::move(model), std::move(tok), config);
}

struct Job {
  std::vector<int32_t> prompt;
  int32_t max_tokens = 0;
};

std::vector<Job> make_jobs(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Job> jobs;
  for (int i = 0; i < n; ++i) {
    Job j;
    j.prompt = {1};
    // Prompts past budget + one block (48), so evictions fall inside prefill
    // chunks as well as between decodes; prompt + output fit 96 tokens.
    const int extra = 50 + static_cast<int>(rng() % 25);
    for (int k = 0; k < extra; ++k) j.prompt.push_back(3 + static_cast<int32_t>(rng() % 509));
    j.max_tokens = 15 + static_cast<int32_t>(rng() % 5);
    jobs.push_back(j);
  }
  return jobs;
}

struct Output {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;  // of each generated token: the bits of its logits row
  RequestStats stats;
};

GenerateRequest budgeted(const Job& j, const KvBudget& b) {
  GenerateRequest g;
  g.prompt_tokens = j.prompt;
  g.max_tokens = j.max_tokens;
  g.sampling.temperature = 0.f;
  g.ignore_eos = true;
  g.logprobs = 0;
  g.kv_budget = b;
  return g;
}

std::vector<Output> run(Engine& engine, const std::vector<Job>& jobs, const KvBudget& b, bool all_at_once) {
  std::vector<Output> out(jobs.size());
  auto drain = [&](RequestStream& s, Output& o) {
    while (auto ev = s.next()) {
      if (ev->error) ADD_FAILURE() << ev->error->what();
      o.tokens.insert(o.tokens.end(), ev->tokens.begin(), ev->tokens.end());
      for (const auto& lp : ev->logprobs) o.logprobs.push_back(lp.chosen.logprob);
    }
    o.stats = s.stats();
  };
  if (all_at_once) {
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const Job& j : jobs) streams.push_back(engine.submit(budgeted(j, b)));
    for (size_t i = 0; i < jobs.size(); ++i) drain(*streams[i], out[i]);
  } else {
    for (size_t i = 0; i < jobs.size(); ++i) drain(*engine.submit(budgeted(jobs[i], b)), out[i]);
  }
  return out;
}

using test::expect_pool_whole;

class KvBudgetEngine : public ::testing::TestWithParam<std::tuple<KvPolicyKind, bool>> {};

TEST_P(KvBudgetEngine, BitIdenticalInAnyChunkingBatchingAndPreemption) {
  KvBudget b;
  b.budget_tokens = 32;
  b.policy = std::get<0>(GetParam());
  b.shift = std::get<1>(GetParam());
  const std::vector<Job> jobs = make_jobs(8, 17);

  auto alone_engine = make_engine(EngineConfig{});
  const std::vector<Output> alone = run(*alone_engine, jobs, b, false);
  for (const Output& o : alone) {
    EXPECT_EQ(o.stats.peak_resident_tokens, 32 + 16);  // every job runs past its budget
    EXPECT_EQ(o.logprobs.size(), o.tokens.size());
  }
  EXPECT_GT(alone_engine->metrics().num_kv_evicted_tokens[static_cast<size_t>(b.policy)], 0);

  EngineConfig chunked;
  chunked.max_batched_tokens = 7;  // chunks that straddle every eviction point, beside the others
  auto chunked_engine = make_engine(chunked);
  const std::vector<Output> batched = run(*chunked_engine, jobs, b, true);

  EngineConfig tight;
  tight.kv_tokens = 112;  // 7 blocks: a third request squeezes in beside two of 3 blocks, then preemption
  tight.max_batched_tokens = 64;
  auto tight_engine = make_engine(tight);
  const std::vector<Output> preempted = run(*tight_engine, jobs, b, true);
  EXPECT_GT(tight_engine->metrics().num_preemptions, 0) << "the pool was meant to run short";

  for (size_t i = 0; i < jobs.size(); ++i) {
    EXPECT_EQ(batched[i].tokens, alone[i].tokens) << "job " << i;
    EXPECT_EQ(batched[i].logprobs, alone[i].logprobs) << "job " << i;
    EXPECT_EQ(preempted[i].tokens, alone[i].tokens) << "job " << i;
    EXPECT_EQ(preempted[i].logprobs, alone[i].logprobs) << "job " << i;
  }
  expect_pool_whole(*alone_engine);
  expect_pool_whole(*chunked_engine);
  expect_pool_whole(*tight_engine);
}

INSTANTIATE_TEST_SUITE_P(
    AllPolicies, KvBudgetEngine,
    ::testing::Combine(::testing::ValuesIn(all_kv_policies().begin(), all_kv_policies().end()), ::testing::Bool()),
    [](const auto& info) {
      std::string n(kv_policy_name(std::get<0>(info.param)));
      for (char& c : n) c = c == '-' ? '_' : c;
      return n + (std::get<1>(info.param) ? "_shift" : "");
    });

// A budget changes what the model sees: once tokens are dropped the output
// differs from the unbounded run (else the test above could pass by ignoring
// budgets), and an unbounded budget gives the plain output.
TEST(KvBudgetEngineOutput, DroppingTokensChangesTheLogits) {
  const std::vector<Job> jobs = make_jobs(2, 5);
  auto engine = make_engine(EngineConfig{});
  KvBudget b;
  b.budget_tokens = 32;
  b.policy = KvPolicyKind::kWindow;
  const std::vector<Output> bounded = run(*engine, jobs, b, false);
  const std::vector<Output> full = run(*engine, jobs, KvBudget{}, false);
  for (size_t i = 0; i < jobs.size(); ++i) {
    EXPECT_NE(bounded[i].logprobs, full[i].logprobs) << "job " << i;
    EXPECT_EQ(full[i].stats.peak_resident_tokens, static_cast<int32_t>(jobs[i].prompt.size()) + jobs[i].max_tokens - 1);
  }
}

TEST(KvBudgetEngineErrors, RefusesWhatCannotWork) {
  auto engine = make_engine(EngineConfig{});
  Job j{{1, 5, 6}, 4};
  KvBudget b;
  b.budget_tokens = 8;  // below two blocks of 16
  EXPECT_THROW(engine->submit(budgeted(j, b)), Error);
  auto gpt2 = Model::load(test::shared_path("models/synth-gpt2-F16.gguf"));
  auto tok = Tokenizer::from_metadata(gpt2->gguf().metadata());
  Engine learned(std::move(gpt2), std::move(tok), EngineConfig{});
  b.budget_tokens = 32;
  b.shift = true;
  try {
    learned.submit(budgeted(j, b));
    ADD_FAILURE() << "gpt2 accepted kv_shift";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("learned positions"), std::string::npos) << e.what();
  }
}

}  // namespace kvlm::kv_budget_engine_test
