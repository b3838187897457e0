// Sampling a batch on the compute threads (Engine::sample_batch) changes
// nothing a client sees: every event of every request — tokens, text,
// logprobs, prompt logprobs, finish reason, error — equals a run that samples
// on the engine thread alone, for a mix of seeded sampling, penalties, logit
// bias, grammars, n choices and one request whose sampling throws.
#include <gtest/gtest.h>

#include <random>

#include "constrain/constraint.h"
#include "engine/engine.h"
#include "engine/fault_injection.h"
#include "model/model.h"
#include "support/test_support.h"
#include "tokenizer/tokenizer.h"

namespace kvlm::sample_threads_test {

std::unique_ptr<Engine> make_engine(const EngineConfig& config) {
  auto model = Model::load(test::shared_path("models/stories260K.gguf"));
  auto tok = Tokenizer::from_metadata(model->gguf().metadata());
  return std::make_unique<Engine>(std::move(model), std::move(tok), config);
}

// Everything a client reads, flattened so two runs compare with ==.
struct Transcript {
  std::vector<int32_t> tokens;
  std::string text;
  std::vector<std::tuple<int32_t, float, std::vector<std::pair<int32_t, float>>>> logprobs, prompt_logprobs;
  std::optional<FinishReason> reason;
  std::string error;
  bool operator==(const Transcript&) const = default;
};

void append(std::vector<std::tuple<int32_t, float, std::vector<std::pair<int32_t, float>>>>& to,
            const std::vector<SampledLogprobs>& from) {
  for (const SampledLogprobs& lp : from) {
    std::vector<std::pair<int32_t, float>> top;
    for (const TokenLogprob& t : lp.top) top.emplace_back(t.token, t.logprob);
    to.emplace_back(lp.chosen.token, lp.chosen.logprob, std::move(top));
  }
}

Transcript drain(RequestStream& s) {
  Transcript t;
  while (auto ev = s.next()) {
    t.tokens.insert(t.tokens.end(), ev->tokens.begin(), ev->tokens.end());
    t.text += ev->text;
    append(t.logprobs, ev->logprobs);
    append(t.prompt_logprobs, ev->prompt_logprobs);
    if (ev->finished) t.reason = ev->finish_reason;
    if (ev->error) t.error = ev->error->what();
  }
  return t;
}

// 20 requests and one with 3 choices, each unlike its neighbours.
std::vector<std::pair<GenerateRequest, int32_t>> make_requests() {
  std::mt19937 rng(5);
  auto regex = constrain::regex_program("[a-z ]{2,30}\\.");
  std::vector<std::pair<GenerateRequest, int32_t>> out;
  for (int i = 0; i < 21; ++i) {
    GenerateRequest g;
    g.prompt_tokens = {1};
    for (int k = 0, n = 2 + static_cast<int>(rng() % 30); k < n; ++k)
      g.prompt_tokens.push_back(3 + static_cast<int32_t>(rng() % 509));
    g.max_tokens = 4 + static_cast<int32_t>(rng() % 30);
    g.sampling.seed = 100 + static_cast<uint64_t>(i);
    g.sampling.temperature = i % 5 == 0 ? 0.f : 0.9f;
    if (i % 4 == 1) g.sampling.repetition_penalty = 1.3f, g.sampling.frequency_penalty = 0.5f;
    if (i % 6 == 2) g.sampling.logit_bias = {{13, 5.f}, {200, -100.f}};
    if (i % 3 == 0) g.logprobs = static_cast<int32_t>(i % 4);
    if (i % 7 == 3) g.prompt_logprobs = true;
    if (i % 5 == 4) g.constraint = regex;
    out.emplace_back(std::move(g), i == 10 ? 3 : 1);
  }
  return out;
}

std::vector<Transcript> run(const EngineConfig& config) {
  auto engine = make_engine(config);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (auto& [g, n] : make_requests())
    for (auto& s : engine->submit_n(g, n)) streams.push_back(std::move(s));
  std::vector<Transcript> out;
  for (auto& s : streams) out.push_back(drain(*s));
  return out;
}

TEST(EngineSampleThreads, EveryEventEqualsSerialSampling) {
  EngineConfig serial;
  serial.num_threads = 1;
  serial.block_size = 4;
  serial.max_batched_tokens = 96;  // prompts in chunks beside decodes
  serial.fault_hook = fault_hook(parse_fault_spec("kind=error,request=7,at=3"));
  const std::vector<Transcript> want = run(serial);
  ASSERT_EQ(want.size(), 23u);
  EXPECT_NE(want[6].error.find("injected fault"), std::string::npos) << want[6].error;
  int num_constrained_stops = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (i != 6) {
      EXPECT_EQ(want[i].error, "") << "request " << i;
    }
    num_constrained_stops += want[i].reason == FinishReason::kStop;
  }
  EXPECT_GT(num_constrained_stops, 0) << "no grammar finished: the constrained rows were not exercised";

  for (int threads : {2, 4}) {
    EngineConfig parallel = serial;
    parallel.num_threads = threads;
    parallel.sample_logits_per_task = 1;  // every sequence may go to another thread
    const std::vector<Transcript> got = run(parallel);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(got[i] == want[i]) << threads << " threads, request " << i;
  }
}

}  // namespace kvlm::sample_threads_test
