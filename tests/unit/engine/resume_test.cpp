// Resumed generations (GenerateRequest::num_replayed): a request given its
// own earlier output goes on exactly as the uninterrupted run did — greedy
// or seeded sampling, with stop strings and a grammar — and its first event
// replays that output's text.
#include <gtest/gtest.h>

#include "constrain/constraint.h"
#include "engine/engine.h"
#include "model/model.h"
#include "support/test_support.h"
#include "tokenizer/tokenizer.h"

namespace kvlm::resume_test {

std::unique_ptr<Engine> make_engine() {
  auto model = Model::load(test::shared_path("models/stories260K.gguf"));
  auto tok = Tokenizer::from_metadata(model->gguf().metadata());
  return std::make_unique<Engine>(std::move(model), std::move(tok), EngineConfig{});
}

GenerateRequest base(const Engine& engine, float temperature, uint64_t seed) {
  GenerateRequest g;
  g.prompt_tokens = engine.tokenizer().encode("Once upon a time, there was a little", true, false);
  g.max_tokens = 40;
  g.sampling.temperature = temperature;
  g.sampling.seed = seed;
  return g;
}

struct Output {
  std::vector<int32_t> tokens;  // generated (replayed ones apart)
  std::string text;             // generated text (replayed text apart)
  std::vector<int32_t> replayed;
  std::string replayed_text;
  std::optional<FinishReason> reason;
};

Output drain(RequestStream& s) {
  Output out;
  while (auto ev = s.next()) {
    if (ev->error) ADD_FAILURE() << ev->error->what();
    if (ev->replayed) {
      out.replayed = ev->tokens;
      out.replayed_text = ev->text;
      continue;
    }
    out.tokens.insert(out.tokens.end(), ev->tokens.begin(), ev->tokens.end());
    out.text += ev->text;
    if (ev->finished) out.reason = ev->finish_reason;
  }
  return out;
}

// The request `g` resumed after its first `k` generated tokens of `full`.
GenerateRequest resumed(GenerateRequest g, const Output& full, int32_t k) {
  g.prompt_tokens.insert(g.prompt_tokens.end(), full.tokens.begin(), full.tokens.begin() + k);
  g.num_replayed = k;
  g.max_tokens -= k;
  return g;
}

// Resuming after every k in `cuts` gives the uninterrupted output back.
void expect_resumes_equal(Engine& engine, const GenerateRequest& g, const std::vector<int32_t>& cuts) {
  const Output full = drain(*engine.submit(g));
  ASSERT_GT(full.tokens.size(), static_cast<size_t>(cuts.back())) << "the run ended before the last cut";
  for (int32_t k : cuts) {
    const Output rest = drain(*engine.submit(resumed(g, full, k)));
    EXPECT_EQ(rest.replayed, std::vector<int32_t>(full.tokens.begin(), full.tokens.begin() + k)) << "cut " << k;
    std::vector<int32_t> joined = rest.replayed;
    joined.insert(joined.end(), rest.tokens.begin(), rest.tokens.end());
    EXPECT_EQ(joined, full.tokens) << "cut " << k;
    EXPECT_EQ(rest.replayed_text + rest.text, full.text) << "cut " << k;
    EXPECT_EQ(rest.reason, full.reason) << "cut " << k;
  }
}

TEST(EngineResume, GreedyGoesOnAsTheUninterruptedRun) {
  auto engine = make_engine();
  expect_resumes_equal(*engine, base(*engine, 0.f, 0), {1, 7, 20});
}

TEST(EngineResume, SeededSamplingContinuesItsRandomStream) {
  auto engine = make_engine();
  GenerateRequest g = base(*engine, 1.0f, 1234);
  g.ignore_eos = true;
  g.sampling.repetition_penalty = 1.3f;  // the penalties see the replayed tokens as history
  expect_resumes_equal(*engine, g, {1, 13, 30});
  // Without skipping the draws the continuation would differ: a fresh
  // request over the same tokens samples something else.
  const Output full = drain(*engine->submit(g));
  GenerateRequest fresh = resumed(g, full, 13);
  fresh.num_replayed = 0;
  const Output other = drain(*engine->submit(fresh));
  EXPECT_NE(other.tokens, std::vector<int32_t>(full.tokens.begin() + 13, full.tokens.end()));
}

TEST(EngineResume, StopStringsSpanningTheCutStillStop) {
  auto engine = make_engine();
  GenerateRequest g = base(*engine, 0.f, 0);
  const Output free_run = drain(*engine->submit(g));
  ASSERT_GT(free_run.text.size(), 60u);
  // A stop string from the middle of the output: the run stops there.
  g.stop = {free_run.text.substr(50, 6)};
  const Output stopped = drain(*engine->submit(g));
  ASSERT_LT(stopped.text.size(), free_run.text.size());
  ASSERT_EQ(stopped.reason, FinishReason::kStop);
  // Cut before the stop string: the resumed run stops at the same byte.
  for (int32_t k : {2, 8}) {
    const Output rest = drain(*engine->submit(resumed(g, stopped, k)));
    EXPECT_EQ(rest.replayed_text + rest.text, stopped.text) << "cut " << k;
    EXPECT_EQ(rest.reason, FinishReason::kStop);
  }
}

TEST(EngineResume, TheGrammarContinuesWhereTheOutputStopped) {
  auto engine = make_engine();
  GenerateRequest g = base(*engine, 0.8f, 99);
  g.constraint = constrain::regex_program("[a-z]+( [a-z]+){8}\\.");
  const Output full = drain(*engine->submit(g));
  ASSERT_GT(full.tokens.size(), 6u);
  expect_resumes_equal(*engine, g, {1, 5});
  // Output the grammar could not have produced is refused at submission.
  GenerateRequest bad = resumed(g, full, 2);
  bad.prompt_tokens.back() = engine->tokenizer().encode("X9", false, false).back();
  EXPECT_THROW(engine->submit(bad), Error);
}

TEST(EngineResume, RefusesOutputThatCouldNotHaveBeenSent) {
  auto engine = make_engine();
  GenerateRequest g = base(*engine, 0.f, 0);
  const Output full = drain(*engine->submit(g));
  GenerateRequest ended = resumed(g, full, 3);
  ended.prompt_tokens.back() = 2;  // stories260K's end of text: the output would have ended there
  EXPECT_THROW(engine->submit(ended), Error);
  GenerateRequest all_replayed = resumed(g, full, 3);
  all_replayed.num_replayed = static_cast<int32_t>(all_replayed.prompt_tokens.size());
  EXPECT_THROW(engine->submit(all_replayed), Error);
  EXPECT_THROW(engine->submit_n(resumed(g, full, 3), 2), Error);
  EXPECT_EQ(engine->num_unfinished(), 0);
}

}  // namespace kvlm::resume_test
