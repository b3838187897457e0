// Faults injected into one request's step (engine/fault_injection.h) and the
// per-request time limit: the failing request ends with a clear error, every
// other request's greedy tokens equal a run without the fault, and the pool
// is whole after.
#include <gtest/gtest.h>

#include <new>
#include <random>
#include <thread>

#include "common/clock.h"
#include "common/error.h"
#include "engine/engine.h"
#include "engine/fault_injection.h"
#include "model/model.h"
#include "support/engine_support.h"
#include "support/test_support.h"
#include "tokenizer/tokenizer.h"

namespace kvlm::fault_test {

std::unique_ptr<Engine> make_engine(EngineConfig config, const Clock& clock = steady_clock()) {
  auto model = Model::load(test::shared_path("models/stories260K.gguf"));
  auto tok = Tokenizer::from_metadata(model->gguf().metadata());
  return std::make_unique<Engine>(std::move(model), std::move(tok), config, clock);
}

struct Outcome {
  std::vector<int32_t> tokens;
  std::optional<FinishReason> reason;
  std::optional<Error> error;
};

Outcome drain(RequestStream& s) {
  Outcome o;
  while (auto ev = s.next()) {
    o.tokens.insert(o.tokens.end(), ev->tokens.begin(), ev->tokens.end());
    if (ev->error) o.error = ev->error;
    if (ev->finished) o.reason = ev->finish_reason;
  }
  return o;
}

// Greedy requests with a shared 20-token prefix (prefix-cache hits) and
// random tails.
std::vector<GenerateRequest> make_requests(int n) {
  std::mt19937 rng(11);
  std::vector<int32_t> prefix = {1};
  while (prefix.size() < 20) prefix.push_back(3 + static_cast<int32_t>(rng() % 509));
  std::vector<GenerateRequest> out;
  for (int i = 0; i < n; ++i) {
    GenerateRequest g;
    g.prompt_tokens = prefix;
    for (int k = 0, extra = 1 + static_cast<int>(rng() % 30); k < extra; ++k)
      g.prompt_tokens.push_back(3 + static_cast<int32_t>(rng() % 509));
    g.max_tokens = 8 + static_cast<int32_t>(rng() % 40);
    g.sampling.temperature = 0.f;
    g.ignore_eos = true;
    out.push_back(g);
  }
  return out;
}

std::vector<Outcome> run_all(Engine& engine, const std::vector<GenerateRequest>& requests) {
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& g : requests) streams.push_back(engine.submit(g));
  std::vector<Outcome> out;
  for (auto& s : streams) out.push_back(drain(*s));
  return out;
}

using test::expect_pool_whole;

// A fault in request `faulty` (ids start at 1 in submission order): it fails
// with `message`, the others match the run without faults.
void expect_one_failed(const std::vector<Outcome>& baseline, const std::vector<Outcome>& got, size_t faulty,
                       const std::string& message) {
  ASSERT_EQ(got.size(), baseline.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (i == faulty) {
      ASSERT_TRUE(got[i].error) << "the faulty request did not fail";
      EXPECT_NE(std::string(got[i].error->what()).find(message), std::string::npos) << got[i].error->what();
      EXPECT_FALSE(got[i].reason);
      continue;
    }
    EXPECT_FALSE(got[i].error) << "request " << i << ": " << got[i].error->what();
    EXPECT_EQ(got[i].tokens, baseline[i].tokens) << "request " << i;
    EXPECT_EQ(got[i].reason, FinishReason::kLength) << "request " << i;
  }
}

struct FaultCase {
  const char* spec;
  size_t faulty;        // index of the request the spec picks (id - 1)
  const char* message;  // in its error
  int32_t kv_tokens;    // pool size: small ones force preemption
};

// Test names show the spec and the pool, not the parameter's bytes.
void PrintTo(const FaultCase& c, std::ostream* os) { *os << c.spec << " kv_tokens=" << c.kv_tokens; }

class EngineFault : public ::testing::TestWithParam<FaultCase> {};

TEST_P(EngineFault, FailsOneRequestOnly) {
  const FaultCase& c = GetParam();
  const auto requests = make_requests(12);
  EngineConfig config;
  config.block_size = 4;
  config.kv_tokens = c.kv_tokens;
  config.max_batched_tokens = 64;
  auto clean = make_engine(config);
  const std::vector<Outcome> baseline = run_all(*clean, requests);
  for (const Outcome& o : baseline) ASSERT_FALSE(o.error) << o.error->what();

  config.fault_hook = fault_hook(parse_fault_spec(c.spec));
  auto engine = make_engine(config);
  expect_one_failed(baseline, run_all(*engine, requests), c.faulty, c.message);
  expect_pool_whole(*engine);
  EXPECT_EQ(engine->metrics().num_requests_failed, 1);
  if (c.kv_tokens < 1000) {
    EXPECT_GT(engine->metrics().num_preemptions, 0) << "the small pool did not preempt";
  }
  // The engine goes on serving.
  const auto again = run_all(*engine, {requests[0]});
  EXPECT_EQ(again[0].tokens, baseline[0].tokens);
  expect_pool_whole(*engine);
}

INSTANTIATE_TEST_SUITE_P(
    Faults, EngineFault,
    ::testing::Values(FaultCase{"kind=bad_alloc,request=4,at=3", 3, "out of memory", 4096},
                      FaultCase{"kind=error,request=7,at=0", 6, "injected fault", 4096},
                      // 40 blocks of 4 for 12 requests of up to 90 tokens: preemption.
                      FaultCase{"kind=bad_alloc,request=2,at=5", 1, "out of memory", 160},
                      FaultCase{"kind=error,request=12,at=7", 11, "injected fault", 160}));

TEST(EngineFaultChoices, FailedFirstChoiceReleasesItsSiblings) {
  // Choices 2 and 3 wait for choice 1's prefill; its failure must start them.
  GenerateRequest g = make_requests(1)[0];
  EngineConfig config;
  auto clean = make_engine(config);
  const Outcome alone = drain(*clean->submit(g));
  config.fault_hook = fault_hook(parse_fault_spec("kind=error,request=1,at=0"));
  auto engine = make_engine(config);
  auto streams = engine->submit_n(g, 3);
  ASSERT_EQ(streams.size(), 3u);
  EXPECT_TRUE(drain(*streams[0]).error);
  for (size_t i = 1; i < 3; ++i) {
    const Outcome o = drain(*streams[i]);
    EXPECT_FALSE(o.error);
    EXPECT_EQ(o.tokens, alone.tokens) << "choice " << i;  // greedy: every choice alike
  }
  expect_pool_whole(*engine);
}

TEST(EngineTimeout, StopsOnlyTheLateRequest) {
  // A fake clock the hook moves: request 3 passes its 10 s limit after 4
  // tokens; the others have no limit and are not touched.
  FakeClock clock;
  const auto requests = make_requests(6);
  EngineConfig config;
  auto clean = make_engine(config);
  const std::vector<Outcome> baseline = run_all(*clean, requests);
  config.fault_hook = [&clock](RequestId id, int32_t num_generated) {
    if (id.value() == 3 && num_generated == 4) clock.advance(60);
  };
  auto engine = make_engine(config, clock);
  auto timed = requests;
  timed[2].timeout_s = 10;
  expect_one_failed(baseline, run_all(*engine, timed), 2, "time limit of 10 s");
  expect_pool_whole(*engine);
  EXPECT_EQ(engine->metrics().num_requests_timed_out, 1);
}

TEST(FaultSpec, ParsesAndRejects) {
  const FaultSpec s = parse_fault_spec("kind=delay,ms=20,every=3,at=2");
  EXPECT_EQ(s.kind, FaultKind::kDelay);
  EXPECT_EQ(s.delay_ms, 20);
  EXPECT_EQ(s.every, 3);
  EXPECT_EQ(s.at, 2);
  EXPECT_FALSE(s.request);
  EXPECT_EQ(parse_fault_spec("request=9").request, 9);
  for (const char* bad : {"kind=boom", "every=0", "at=-1", "request=x", "nokey", "colour=red"})
    EXPECT_THROW(parse_fault_spec(bad), Error) << bad;
  // every=3 picks ids 3, 6, ... at their `at`-th token only.
  auto hook = fault_hook(parse_fault_spec("kind=bad_alloc,every=3,at=1"));
  EXPECT_NO_THROW(hook(RequestId(3), 0));
  EXPECT_THROW(hook(RequestId(6), 1), std::bad_alloc);
  EXPECT_NO_THROW(hook(RequestId(4), 1));
}

}  // namespace kvlm::fault_test
