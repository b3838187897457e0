// n choices of one prompt (Engine::submit_n): each equals the single request
// with seed + i, and the prompt's full blocks are computed once and shared.
#include <gtest/gtest.h>

#include <thread>

#include "engine/engine.h"
#include "model/model.h"
#include "support/test_support.h"
#include "tokenizer/tokenizer.h"

namespace kvlm::choices_test {

std::unique_ptr<Engine> make_engine(EngineConfig config = {}) {
  auto model = Model::load(test::shared_path("models/stories260K.gguf"));
  auto tok = Tokenizer::from_metadata(model->gguf().metadata());
  return std::make_unique<Engine>(std::move(model), std::move(tok), config);
}

GenerateRequest sampled(uint64_t seed) {
  GenerateRequest g;
  g.prompt_tokens = {1};
  for (int i = 0; i < 100; ++i) g.prompt_tokens.push_back(3 + (i * 37) % 500);
  g.max_tokens = 30;
  g.sampling.temperature = 0.9f;
  g.sampling.seed = seed;
  g.ignore_eos = true;
  return g;
}

std::vector<int32_t> drain(RequestStream& s) {
  std::vector<int32_t> out;
  while (auto ev = s.next()) {
    if (ev->error) ADD_FAILURE() << ev->error->what();
    out.insert(out.end(), ev->tokens.begin(), ev->tokens.end());
  }
  return out;
}

TEST(EngineChoices, EachChoiceIsItsSeedsTwinAndThePromptIsComputedOnce) {
  auto engine = make_engine();
  auto streams = engine->submit_n(sampled(42), 4);
  ASSERT_EQ(streams.size(), 4u);
  std::vector<std::vector<int32_t>> choices;
  for (auto& s : streams) choices.push_back(drain(*s));
  // 101 prompt tokens: 6 full blocks of 16, each a prefix hit for choices 1..3.
  EXPECT_EQ(engine->metrics().num_prefix_hit_tokens, 3 * 6 * 16);
  EXPECT_EQ(streams[0]->stats().num_cached_tokens, 0);
  for (size_t i = 1; i < streams.size(); ++i) EXPECT_EQ(streams[i]->stats().num_cached_tokens, 96) << i;
  EXPECT_NE(choices[0], choices[1]) << "different seeds, different samples";

  EngineConfig no_cache;
  no_cache.prefix_caching = false;
  auto alone = make_engine(no_cache);
  for (size_t i = 0; i < choices.size(); ++i)
    EXPECT_EQ(drain(*alone->submit(sampled(42 + i))), choices[i]) << "choice " << i;
}

TEST(EngineChoices, CancellingAWaitingChoiceReleasesEverything) {
  auto engine = make_engine();
  auto streams = engine->submit_n(sampled(7), 3);
  engine->cancel(streams[2]->id());
  for (auto& s : streams) drain(*s);
  for (int i = 0; i < 100 && engine->metrics().num_kv_blocks_used != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(engine->metrics().num_kv_blocks_used, 0);
  EXPECT_EQ(engine->metrics().num_running, 0);
  EXPECT_THROW(engine->submit_n(sampled(7), 0), Error);
}

// Several prompts at once (a completions request's list `prompt`): streams
// prompt-major, and a prompt sharing whole blocks with an earlier one waits
// for it and takes them from the cache; one sharing nothing starts at once.
TEST(EngineChoices, ABatchOfPromptsSharesTheirCommonBlocks) {
  auto engine = make_engine();
  GenerateRequest a = sampled(1), b = sampled(2), c = sampled(3);
  b.prompt_tokens.resize(70);                 // 4 whole blocks in common with a
  b.prompt_tokens.push_back(499);
  c.prompt_tokens = {1, 5, 6, 7, 8, 9, 10};   // nothing in common
  std::vector<GenerateRequest> batch;
  for (GenerateRequest* g : {&a, &b, &c}) batch.push_back(*g);
  auto streams = engine->submit_batch(std::move(batch), 2);
  ASSERT_EQ(streams.size(), 6u);
  std::vector<std::vector<int32_t>> outputs;
  for (auto& s : streams) outputs.push_back(drain(*s));
  EXPECT_EQ(streams[0]->stats().num_cached_tokens, 0);
  EXPECT_EQ(streams[1]->stats().num_cached_tokens, 96);  // a's second choice
  EXPECT_EQ(streams[2]->stats().num_cached_tokens, 64);  // b after a
  EXPECT_EQ(streams[3]->stats().num_cached_tokens, 64);
  EXPECT_EQ(streams[4]->stats().num_cached_tokens, 0);
  // Prompt-major, each choice its seed's twin.
  EngineConfig no_cache;
  no_cache.prefix_caching = false;
  auto alone = make_engine(no_cache);
  GenerateRequest b_seed3 = b;
  b_seed3.sampling.seed = 3;
  EXPECT_EQ(drain(*alone->submit(b_seed3)), outputs[3]);
  GenerateRequest c_seed3 = c;
  EXPECT_EQ(drain(*alone->submit(c_seed3)), outputs[4]);
}

}  // namespace kvlm::choices_test
