// The engine on the real stories260K model: batching, preemption and prefix
// caching must not change a single greedy token, and the pool is whole after.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "common/error.h"
#include "engine/engine.h"
#include "model/model.h"
#include "runner/sampler.h"
#include "runner/sequence_evaluator.h"
#include "support/engine_support.h"
#include "support/test_support.h"
#include "tokenizer/tokenizer.h"

namespace kvlm::engine_test {

std::unique_ptr<Engine> make_engine(EngineConfig config, const std::string& model_file = "models/stories260K.gguf") {
  auto model = Model::load(test::shared_path(model_file));
  auto tok = Tokenizer::from_metadata(model->gguf().metadata());
  return std::make_unique<Engine>(std::move(model), std::move(tok), config);
}

struct Job {
  std::vector<int32_t> prompt;
  int32_t max_tokens;
};

// Mixed prompt and output lengths; random tokens after BOS, optionally
// starting with a shared prefix.
std::vector<Job> make_jobs(int n, int shared_prefix, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> prefix = {1};
  while (static_cast<int>(prefix.size()) < shared_prefix) prefix.push_back(3 + rng() % 509);
  std::vector<Job> jobs;
  for (int i = 0; i < n; ++i) {
    Job j;
    j.prompt = prefix;
    int extra = 1 + static_cast<int>(rng() % 60);
    for (int k = 0; k < extra; ++k) j.prompt.push_back(3 + rng() % 509);
    j.max_tokens = 1 + static_cast<int>(rng() % 40);
    jobs.push_back(j);
  }
  return jobs;
}

struct Result {
  std::vector<int32_t> tokens;
  RequestStats stats;
  std::optional<FinishReason> reason;
};

Result drain(RequestStream& s) {
  Result r;
  while (auto ev = s.next()) {
    r.tokens.insert(r.tokens.end(), ev->tokens.begin(), ev->tokens.end());
    if (ev->error) ADD_FAILURE() << "request failed: " << ev->error->what();
    if (ev->finished) r.reason = ev->finish_reason;
  }
  r.stats = s.stats();
  return r;
}

GenerateRequest greedy(const Job& j) {
  GenerateRequest g;
  g.prompt_tokens = j.prompt;
  g.max_tokens = j.max_tokens;
  g.sampling.temperature = 0.f;
  g.ignore_eos = true;
  return g;
}

// Reference: the plain sequence evaluator, one token at a time after the prompt.
std::vector<int32_t> reference_greedy(const Model& model, const Job& j) {
  SequenceEvaluator eval(model, static_cast<int32_t>(j.prompt.size()) + j.max_tokens);
  std::vector<int32_t> out;
  auto logits = eval.eval(j.prompt, false);
  for (int i = 0; i < j.max_tokens; ++i) {
    int32_t t = argmax(logits);
    out.push_back(t);
    if (i + 1 < j.max_tokens) logits = eval.eval(std::span<const int32_t>(&t, 1), false);
  }
  return out;
}

std::vector<Result> run_all_at_once(Engine& engine, const std::vector<Job>& jobs) {
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& j : jobs) streams.push_back(engine.submit(greedy(j)));
  std::vector<Result> results;
  for (auto& s : streams) results.push_back(drain(*s));
  return results;
}

using test::expect_pool_whole;

class EngineBatching : public ::testing::Test {
 protected:
  void SetUp() override {
    jobs_ = make_jobs(32, 0, 7);
    auto model = Model::load(test::shared_path("models/stories260K.gguf"));
    for (const auto& j : jobs_) alone_.push_back(reference_greedy(*model, j));
  }
  std::vector<Job> jobs_;
  std::vector<std::vector<int32_t>> alone_;
};

TEST_F(EngineBatching, EngineAloneEqualsReference) {
  auto engine = make_engine(EngineConfig{});
  for (size_t i = 0; i < 4; ++i) {
    Result r = drain(*engine->submit(greedy(jobs_[i])));
    EXPECT_EQ(r.tokens, alone_[i]) << "request " << i;
    EXPECT_EQ(r.reason, FinishReason::kLength);
  }
  expect_pool_whole(*engine);
}

TEST_F(EngineBatching, AllAtOnceEqualsAlone) {
  EngineConfig c;
  c.max_batched_tokens = 256;  // several steps of mixed prefill chunks and decodes
  auto engine = make_engine(c);
  auto results = run_all_at_once(*engine, jobs_);
  for (size_t i = 0; i < jobs_.size(); ++i) EXPECT_EQ(results[i].tokens, alone_[i]) << "request " << i;
  EXPECT_EQ(engine->metrics().num_preemptions, 0);
  expect_pool_whole(*engine);
}

// The step profile adds up every phase of every step that ran a batch.
TEST_F(EngineBatching, StepTimesCoverEveryPhase) {
  auto engine = make_engine(EngineConfig{});
  run_all_at_once(*engine, jobs_);
  expect_pool_whole(*engine);
  const EngineMetrics m = engine->metrics();
  EXPECT_GT(m.num_steps, 0);
  for (double t : {m.step_times.schedule_s, m.step_times.forward_s, m.step_times.sample_s, m.step_times.postprocess_s})
    EXPECT_GT(t, 0.0);
  EXPECT_DOUBLE_EQ(m.step_times.total_s(), m.step_times.schedule_s + m.step_times.forward_s + m.step_times.sample_s +
                                               m.step_times.postprocess_s);
}

TEST_F(EngineBatching, PreemptionKeepsTokens) {
  EngineConfig c;
  c.block_size = 4;
  c.kv_tokens = 160;  // 40 blocks for 32 requests of up to 100 tokens
  c.max_batched_tokens = 64;
  auto engine = make_engine(c);
  auto results = run_all_at_once(*engine, jobs_);
  for (size_t i = 0; i < jobs_.size(); ++i) EXPECT_EQ(results[i].tokens, alone_[i]) << "request " << i;
  EXPECT_GT(engine->metrics().num_preemptions, 0) << "the pool was meant to run short";
  int preempted = 0;
  for (const auto& r : results) preempted += r.stats.num_preemptions;
  EXPECT_GT(preempted, 0);
  expect_pool_whole(*engine);
}

TEST(EnginePrefix, SharedPrefixIsCachedAndChangesNothing) {
  auto jobs = make_jobs(32, 64, 11);
  auto model = Model::load(test::shared_path("models/stories260K.gguf"));
  EngineConfig c;
  auto engine = make_engine(c);
  // The first request computes the prefix; the rest find it cached.
  Result first = drain(*engine->submit(greedy(jobs[0])));
  EXPECT_EQ(first.tokens, reference_greedy(*model, jobs[0]));
  EXPECT_EQ(first.stats.num_cached_tokens, 0);
  std::vector<Job> rest(jobs.begin() + 1, jobs.end());
  auto results = run_all_at_once(*engine, rest);
  for (size_t i = 0; i < rest.size(); ++i) {
    EXPECT_EQ(results[i].tokens, reference_greedy(*model, rest[i])) << "request " << i + 1;
    EXPECT_GE(results[i].stats.num_cached_tokens, 64) << "request " << i + 1;  // 4 full blocks of 16
  }
  EngineMetrics m = engine->metrics();
  EXPECT_GT(m.num_prefix_hit_tokens, 0);
  expect_pool_whole(*engine);
}

// Gemma-2 has full layers and sliding-window layers (window 8 in the synth
// model, blocks of 16): a hit takes every full-layer block but only the
// window's blocks of the sliding layers, and changes no token.
TEST(EnginePrefix, SlidingWindowModelCachesThePrefixToo) {
  const std::string file = "models/synth-gemma2-F32.gguf";
  auto jobs = make_jobs(8, 64, 5);
  auto model = Model::load(test::shared_path(file));
  auto engine = make_engine(EngineConfig{}, file);
  Result first = drain(*engine->submit(greedy(jobs[0])));
  EXPECT_EQ(first.tokens, reference_greedy(*model, jobs[0]));
  std::vector<Job> rest(jobs.begin() + 1, jobs.end());
  auto results = run_all_at_once(*engine, rest);
  for (size_t i = 0; i < rest.size(); ++i) {
    EXPECT_EQ(results[i].tokens, reference_greedy(*model, rest[i])) << "request " << i + 1;
    EXPECT_GE(results[i].stats.num_cached_tokens, 64) << "request " << i + 1;
  }
  // The same prompt again: everything but its last block's worth is cached.
  Result again = drain(*engine->submit(greedy(jobs[3])));
  EXPECT_EQ(again.tokens, results[2].tokens);
  EXPECT_EQ(again.stats.num_cached_tokens, (static_cast<int32_t>(jobs[3].prompt.size()) - 1) / 16 * 16);
  expect_pool_whole(*engine);
}

// Prompt log-probabilities: one per prompt token after the first, the same
// whether the prompt runs in one step or in chunks next to other requests,
// never taken from the prefix cache, and equal to the sequence evaluator's
// log_softmax of the logits.
TEST(EnginePromptLogprobs, SameInAnyChunkingAndMatchTheEvaluator) {
  auto jobs = make_jobs(6, 48, 3);
  auto model = Model::load(test::shared_path("models/stories260K.gguf"));
  auto collect = [](RequestStream& s) {
    std::vector<SampledLogprobs> lps;
    while (auto ev = s.next()) lps.insert(lps.end(), ev->prompt_logprobs.begin(), ev->prompt_logprobs.end());
    return lps;
  };
  auto with_prompt_logprobs = [](const Job& j) {
    GenerateRequest g = greedy(j);
    g.prompt_logprobs = true;
    g.logprobs = 2;
    return g;
  };
  auto whole = make_engine(EngineConfig{});
  auto first = collect(*whole->submit(with_prompt_logprobs(jobs[0])));
  ASSERT_EQ(first.size(), jobs[0].prompt.size() - 1);
  // Against the evaluator: logits after token i give token i + 1.
  SequenceEvaluator eval(*model, static_cast<int32_t>(jobs[0].prompt.size()));
  for (size_t i = 0; i + 1 < jobs[0].prompt.size(); ++i) {
    auto logits = eval.eval(std::span<const int32_t>(&jobs[0].prompt[i], 1), false);
    const SampledLogprobs want = token_logprobs(logits, jobs[0].prompt[i + 1], 2);
    EXPECT_EQ(first[i].chosen.token, jobs[0].prompt[i + 1]);
    EXPECT_NEAR(first[i].chosen.logprob, want.chosen.logprob, 1e-5) << i;
    EXPECT_EQ(first[i].top[0].token, want.top[0].token) << i;
  }

  EngineConfig small_steps;
  small_steps.max_batched_tokens = 7;  // every prompt in chunks, mixed with the others' decodes
  auto chunked = make_engine(small_steps);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const Job& j : jobs) streams.push_back(chunked->submit(with_prompt_logprobs(j)));
  for (size_t k = 0; k < jobs.size(); ++k) {
    auto lps = collect(*streams[k]);
    auto alone = collect(*whole->submit(with_prompt_logprobs(jobs[k])));
    ASSERT_EQ(lps.size(), jobs[k].prompt.size() - 1) << k;
    for (size_t i = 0; i < lps.size(); ++i) {
      EXPECT_EQ(lps[i].chosen.logprob, alone[i].chosen.logprob) << "job " << k << " token " << i;
      EXPECT_EQ(lps[i].top[1].token, alone[i].top[1].token);
    }
    // The 48-token prefix is cached in `whole` by now, but these requests compute it.
    EXPECT_EQ(streams[k]->stats().num_cached_tokens, 0);
  }
  expect_pool_whole(*whole);
  expect_pool_whole(*chunked);
}

TEST(EngineErrors, PromptLongerThanContextIsRefused) {
  EngineConfig c;
  c.max_model_len = 64;
  auto engine = make_engine(c);
  GenerateRequest g;
  g.prompt_tokens.assign(64, 5);
  try {
    engine->submit(g);
    FAIL() << "a 64-token prompt in a 64-token context was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfRange);
    EXPECT_NE(std::string(e.what()).find("64"), std::string::npos) << e.what();
  }
  g.prompt_tokens = {1, 99999};
  EXPECT_THROW(engine->submit(g), Error);
  expect_pool_whole(*engine);
}

TEST(EngineErrors, CancelReleasesBlocks) {
  auto engine = make_engine(EngineConfig{});
  GenerateRequest g;
  g.prompt_tokens = {1, 403, 407, 261, 378};
  g.max_tokens = 100000;
  g.ignore_eos = true;
  g.sampling.temperature = 0.f;
  auto s = engine->submit(g);
  auto ev = s->next();  // at least one token generated
  ASSERT_TRUE(ev.has_value());
  engine->cancel(s->id());
  Result r = drain(*s);
  EXPECT_EQ(r.reason, FinishReason::kAborted);
  expect_pool_whole(*engine);
}

TEST(EngineStop, StopStringEndsAndIsNotEmitted) {
  auto engine = make_engine(EngineConfig{});
  const Tokenizer& tok = engine->tokenizer();
  GenerateRequest g;
  g.prompt_tokens = tok.encode("Once upon a time", true, false);
  g.max_tokens = 96;
  g.sampling.temperature = 0.f;
  g.stop = {" named"};
  auto s = engine->submit(g);
  std::string text;
  std::optional<FinishReason> reason;
  while (auto ev = s->next()) {
    text += ev->text;
    if (ev->finished) reason = ev->finish_reason;
  }
  // Golden: ", there was a little girl named Lily."
  EXPECT_EQ(text, ", there was a little girl");
  EXPECT_EQ(reason, FinishReason::kStop);
  expect_pool_whole(*engine);
}

}  // namespace kvlm::engine_test
