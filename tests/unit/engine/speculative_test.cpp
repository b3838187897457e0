// Speculative decoding (engine/spec/speculative.h) on stories260K: greedy output
// is token for token what the engine gives without proposals (batched,
// chunked, preempted, under KV budgets, with a grammar, with logprobs), the
// rejected proposals leave the pool whole, and sampled output follows the
// target distribution (chi-square tests with fixed seeds: they cannot flake),
// with a draft model proposing too.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <thread>

#include "constrain/constraint.h"
#include "engine/spec/draft_proposer.h"
#include "engine/engine.h"
#include "engine/spec/speculative.h"
#include "model/model.h"
#include "runner/sampler.h"
#include "support/engine_support.h"
#include "support/test_support.h"
#include "tokenizer/tokenizer.h"

namespace kvlm::speculative_test {

std::unique_ptr<Engine> make_engine(EngineConfig config, const std::string& file = "models/stories260K.gguf") {
  auto model = Model::load(test::shared_path(file));
  auto tok = Tokenizer::from_metadata(model->gguf().metadata());
  return std::make_unique<Engine>(std::move(model), std::move(tok), config);
}

struct Output {
  std::vector<int32_t> tokens;
  std::vector<SampledLogprobs> logprobs;
  std::optional<FinishReason> reason;
};

Output drain(RequestStream& s) {
  Output out;
  while (auto ev = s.next()) {
    out.tokens.insert(out.tokens.end(), ev->tokens.begin(), ev->tokens.end());
    out.logprobs.insert(out.logprobs.end(), ev->logprobs.begin(), ev->logprobs.end());
    if (ev->error) ADD_FAILURE() << "request failed: " << ev->error->what();
    if (ev->finished) out.reason = ev->finish_reason;
  }
  return out;
}

// Greedy requests: BOS and random tokens, mixed lengths; every third one
// stops at an end token, every fourth asks for logprobs.
std::vector<GenerateRequest> make_requests(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<GenerateRequest> out;
  for (int i = 0; i < n; ++i) {
    GenerateRequest g;
    g.prompt_tokens = {1};
    const int extra = 1 + static_cast<int>(rng() % 40);
    for (int k = 0; k < extra; ++k) g.prompt_tokens.push_back(3 + static_cast<int32_t>(rng() % 509));
    g.max_tokens = 8 + static_cast<int32_t>(rng() % 56);
    g.sampling.temperature = 0.f;
    g.ignore_eos = i % 3 != 0;
    if (i % 4 == 1) g.logprobs = 2;
    out.push_back(g);
  }
  return out;
}

std::vector<Output> run_all(Engine& engine, const std::vector<GenerateRequest>& requests) {
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& g : requests) streams.push_back(engine.submit(g));
  std::vector<Output> out;
  for (auto& s : streams) out.push_back(drain(*s));
  return out;
}

using test::expect_pool_whole;

void expect_same(const std::vector<Output>& want, const std::vector<Output>& got) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(want[i].tokens, got[i].tokens) << "request " << i;
    EXPECT_EQ(want[i].reason, got[i].reason) << "request " << i;
    ASSERT_EQ(want[i].logprobs.size(), got[i].logprobs.size()) << "request " << i;
    for (size_t t = 0; t < want[i].logprobs.size(); ++t) {
      EXPECT_EQ(want[i].logprobs[t].chosen.token, got[i].logprobs[t].chosen.token);
      EXPECT_EQ(want[i].logprobs[t].chosen.logprob, got[i].logprobs[t].chosen.logprob) << "request " << i;
      ASSERT_EQ(want[i].logprobs[t].top.size(), got[i].logprobs[t].top.size());
    }
  }
}

// A replay proposer over the reference outputs: proposals right with
// probability `acceptance` each, so runs accept some and reject others.
std::shared_ptr<ReplayProposer> replay_of(const std::vector<GenerateRequest>& requests,
                                          const std::vector<Output>& outputs, double acceptance) {
  auto p = std::make_shared<ReplayProposer>(acceptance, 512);
  for (size_t i = 0; i < requests.size(); ++i) p->add(requests[i].prompt_tokens, outputs[i].tokens);
  return p;
}

EngineConfig speculating(EngineConfig c, std::shared_ptr<Proposer> proposer, int32_t k) {
  c.speculative.proposer = std::move(proposer);
  c.speculative.num_spec_tokens = k;
  return c;
}

class SpecGreedy : public ::testing::Test {
 protected:
  void SetUp() override {
    requests_ = make_requests(24, 11);
    auto engine = make_engine(EngineConfig{});
    baseline_ = run_all(*engine, requests_);
  }
  // Runs the requests all at once under `config`, checks them against the
  // baseline and the pool, and returns the engine's metrics.
  EngineMetrics check(const EngineConfig& config) {
    auto engine = make_engine(config);
    expect_same(baseline_, run_all(*engine, requests_));
    expect_pool_whole(*engine);
    return engine->metrics();
  }
  std::vector<GenerateRequest> requests_;
  std::vector<Output> baseline_;
};

TEST_F(SpecGreedy, NgramBatchedEqualsOff) {
  EngineConfig c;
  c.speculative.mode = SpeculateMode::kNgram;
  c.speculative.num_spec_tokens = 4;
  const EngineMetrics m = check(c);
  EXPECT_GT(m.num_spec_proposed, 0);
  EXPECT_GT(m.num_spec_accepted, 0) << "stories260K repeats itself: some n-gram proposals must hold";
}

TEST_F(SpecGreedy, ReplayAcceptsAndRejectsAndEqualsOff) {
  const EngineMetrics m = check(speculating(EngineConfig{}, replay_of(requests_, baseline_, 0.6), 5));
  EXPECT_GT(m.num_spec_accepted, 0);
  EXPECT_LT(m.num_spec_accepted, m.num_spec_proposed);
  // Fewer steps than tokens: proposals saved steps.
  EXPECT_GT(m.num_generated_tokens, m.num_steps);
}

TEST_F(SpecGreedy, WrongProposalsChangeNothing) {
  const EngineMetrics m = check(speculating(EngineConfig{}, replay_of(requests_, baseline_, 0.0), 3));
  EXPECT_GT(m.num_spec_proposed, 0);
  EXPECT_EQ(m.num_spec_accepted, 0);
}

TEST_F(SpecGreedy, ChunkedEqualsOff) {
  EngineConfig c = speculating(EngineConfig{}, replay_of(requests_, baseline_, 0.8), 6);
  c.max_batched_tokens = 9;  // prompts in chunks beside verifications
  const EngineMetrics m = check(c);
  EXPECT_GT(m.num_spec_accepted, 0);
}

TEST_F(SpecGreedy, PreemptedEqualsOff) {
  EngineConfig c = speculating(EngineConfig{}, replay_of(requests_, baseline_, 0.8), 6);
  c.kv_tokens = 16 * 10;  // 10 blocks for 24 requests: preemptions
  const EngineMetrics m = check(c);
  EXPECT_GT(m.num_preemptions, 0);
  EXPECT_GT(m.num_spec_accepted, 0);
}

TEST_F(SpecGreedy, AdaptiveEqualsOff) {
  const EngineMetrics m = check(speculating(EngineConfig{}, replay_of(requests_, baseline_, 0.3), 0));
  EXPECT_GT(m.num_spec_proposed, 0);
}

TEST_F(SpecGreedy, SpeculativeFalseProposesNothing) {
  EngineConfig c;
  c.speculative.mode = SpeculateMode::kNgram;
  auto engine = make_engine(c);
  std::vector<GenerateRequest> off = requests_;
  for (auto& g : off) g.speculative = false;
  expect_same(baseline_, run_all(*engine, off));
  EXPECT_EQ(engine->metrics().num_spec_proposed, 0);
}

TEST(SpecBudget, BudgetedRequestsEqualOffBesideSpeculatingOnes) {
  std::vector<GenerateRequest> requests = make_requests(12, 5);
  for (size_t i = 0; i < requests.size(); i += 2) {
    requests[i].kv_budget = KvBudget{.budget_tokens = 32, .policy = KvPolicyKind::kSinks};
    requests[i].max_tokens = 64;
    requests[i].ignore_eos = true;
  }
  auto off = make_engine(EngineConfig{});
  const std::vector<Output> want = run_all(*off, requests);
  auto on = make_engine(speculating(EngineConfig{}, replay_of(requests, want, 0.7), 4));
  expect_same(want, run_all(*on, requests));
  expect_pool_whole(*on);
  EXPECT_GT(on->metrics().num_spec_accepted, 0);
}

TEST(SpecGrammar, ConstrainedEqualsOff) {
  std::vector<GenerateRequest> requests = make_requests(8, 3);
  for (auto& g : requests) {
    g.constraint = constrain::regex_program("[a-z]+( [a-z]+){6}\\.");
    g.max_tokens = 64;
    g.ignore_eos = false;
  }
  auto off = make_engine(EngineConfig{});
  const std::vector<Output> want = run_all(*off, requests);
  for (double acceptance : {1.0, 0.5}) {
    auto on = make_engine(speculating(EngineConfig{}, replay_of(requests, want, acceptance), 5));
    expect_same(want, run_all(*on, requests));
    expect_pool_whole(*on);
    EXPECT_GT(on->metrics().num_spec_accepted, 0);
  }
  for (const Output& o : want) EXPECT_EQ(o.reason, FinishReason::kStop);
}

// Every shared model (each architecture, weight type, a sliding window, a
// 32,000 vocabulary): random weights rarely repeat, so a replay of the
// reference at 0.7 makes the proposals.
class SpecEveryModel : public ::testing::TestWithParam<const char*> {};

TEST_P(SpecEveryModel, GreedyEqualsOff) {
  std::vector<GenerateRequest> requests = make_requests(6, 17);
  auto off = make_engine(EngineConfig{}, GetParam());
  const int32_t vocab = off->model().config().vocab_size;
  for (auto& g : requests) {
    g.max_tokens = 24;
    for (int32_t& t : g.prompt_tokens) t %= vocab;
  }
  const std::vector<Output> want = run_all(*off, requests);
  auto replay = std::make_shared<ReplayProposer>(0.7, vocab);
  for (size_t i = 0; i < requests.size(); ++i) replay->add(requests[i].prompt_tokens, want[i].tokens);
  auto on = make_engine(speculating(EngineConfig{}, replay, 4), GetParam());
  expect_same(want, run_all(*on, requests));
  expect_pool_whole(*on);
  EXPECT_GT(on->metrics().num_spec_accepted, 0);
}

INSTANTIATE_TEST_SUITE_P(Shared, SpecEveryModel,
                         ::testing::Values("models/stories260K.gguf", "models/llama-2-tiny-random.gguf",
                                           "models/synth-tiny-F32.gguf", "models/synth-tiny-F16.gguf",
                                           "models/synth-tiny-Q8_0.gguf", "models/synth-tiny-Q4_0.gguf",
                                           "models/synth-tiny-Q4_K.gguf", "models/synth-tiny-Q6_K.gguf",
                                           "models/synth-gemma2-F32.gguf", "models/synth-qwen2-F32.gguf",
                                           "models/synth-gpt2-F16.gguf"));

TEST(SpecController, KFollowsTheAcceptance) {
  SpecController good(8, 0.1);
  EXPECT_GE(good.num_tokens(), 4) << "no evidence yet: the prior's K";
  for (int i = 0; i < 10; ++i) good.observe(8, 8);
  EXPECT_EQ(good.num_tokens(), 8);
  // Proposals that cost what a decode step does (a draft as large as the
  // target) never pay, however right; a cheap draft's still do.
  EXPECT_EQ(good.num_tokens(1.0), 0);
  EXPECT_GE(good.num_tokens(0.2), 4);
  SpecController middling(8, 0.1);
  for (int i = 0; i < 20; ++i) middling.observe(4, i % 2 == 0 ? 1 : 2);  // a about 0.6
  const int32_t k = middling.num_tokens();
  EXPECT_GE(k, 1);
  EXPECT_LE(k, 4);
  SpecController bad(8, 0.1);
  for (int i = 0; i < 10; ++i) bad.observe(8, 0);
  int32_t num_probes = 0;
  for (int i = 0; i < 32; ++i) num_probes += bad.num_tokens();
  EXPECT_EQ(num_probes, 2) << "one proposal every 16 steps";
}

TEST(NgramProposer, ProposesWhatFollowedTheLatestMatch) {
  NgramProposer p(1, 3);
  // ... 5 6 7 8 ... 5 6 7 9 ... 6 7 -> the latest "6 7" was followed by 9.
  const std::vector<int32_t> tokens = {1, 5, 6, 7, 8, 2, 5, 6, 7, 9, 4, 6, 7};
  EXPECT_EQ(p.propose(RequestId(1), tokens, 3, 3), (std::vector<int32_t>{9, 4, 6}));
  EXPECT_EQ(p.propose(RequestId(1), tokens, 3, 1), (std::vector<int32_t>{9}));
  EXPECT_TRUE(p.propose(RequestId(1), std::vector<int32_t>{1, 2, 3}, 3, 4).empty());
  // The longest n-gram wins over a later shorter one: "5 6 7" (then 8 1), not "7" (then 3).
  const std::vector<int32_t> longer = {5, 6, 7, 8, 1, 7, 3, 5, 6, 7};
  EXPECT_EQ(p.propose(RequestId(1), longer, 2, 2), (std::vector<int32_t>{8, 1}));
}

// Pearson's chi-square statistic of two samples over the same categories,
// with categories expected below 5 in either merged into one.
double two_sample_chi_square(const std::map<std::vector<int32_t>, int>& a, const std::map<std::vector<int32_t>, int>& b,
                             int* degrees) {
  std::map<std::vector<int32_t>, std::pair<double, double>> cells;
  for (const auto& [k, n] : a) cells[k].first += n;
  for (const auto& [k, n] : b) cells[k].second += n;
  double na = 0, nb = 0;
  for (const auto& [k, c] : cells) na += c.first, nb += c.second;
  std::vector<std::pair<double, double>> merged;
  std::pair<double, double> rest{0, 0};
  for (const auto& [k, c] : cells) {
    const double total = c.first + c.second;
    if (total * std::min(na, nb) / (na + nb) < 5) {
      rest.first += c.first, rest.second += c.second;
    } else {
      merged.push_back(c);
    }
  }
  if (rest.first + rest.second > 0) merged.push_back(rest);
  double chi = 0;
  for (const auto& [x, y] : merged) {
    const double total = x + y, ea = total * na / (na + nb), eb = total * nb / (na + nb);
    chi += (x - ea) * (x - ea) / ea + (y - eb) * (y - eb) / eb;
  }
  *degrees = static_cast<int>(merged.size()) - 1;
  return chi;
}

// Upper 0.1% points of chi-square (df 1..30), for the tests' thresholds.
double chi_square_999(int df) {
  static const double table[] = {10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12, 27.88, 29.59,
                                 31.26, 32.91, 34.53, 36.12, 37.70, 39.25, 40.79, 42.31, 43.82, 45.31,
                                 46.80, 48.27, 49.73, 51.18, 52.62, 54.05, 55.48, 56.89, 58.30, 59.70};
  return table[std::clamp(df, 1, 30) - 1];
}

// The sampler alone: with every feature on, a draft tried first gives the
// same distribution as no draft (two samples of 20,000 draws, fixed seeds),
// for a likely draft, an unlikely one and one outside the candidates.
TEST(SpecSampling, DraftKeepsTheSamplersDistribution) {
  const std::vector<float> logits = {2.0f, 1.5f, 1.2f, 0.3f, 0.9f, -1.0f, 1.1f, 0.0f, 1.8f, -0.5f};
  const std::vector<int32_t> history = {0, 0, 8, 3};
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_k = 7;
  p.top_p = 0.97f;
  p.min_p = 0.02f;
  p.repetition_penalty = 1.3f;
  p.frequency_penalty = 0.2f;
  p.presence_penalty = 0.1f;
  p.logit_bias = {{5, 2.5f}};
  constexpr int kDraws = 20000;
  std::map<std::vector<int32_t>, int> plain;
  for (int i = 0; i < kDraws; ++i) {
    p.seed = static_cast<uint64_t>(i);
    Sampler s(p);
    plain[{s.sample(logits, history)}]++;
  }
  for (int32_t draft : {1, 5, 9}) {
    std::map<std::vector<int32_t>, int> drafted;
    for (int i = 0; i < kDraws; ++i) {
      p.seed = static_cast<uint64_t>(kDraws + i);
      Sampler s(p);
      drafted[{s.sample(logits, history, draft)}]++;
    }
    int df = 0;
    const double chi = two_sample_chi_square(plain, drafted, &df);
    EXPECT_LT(chi, chi_square_999(df)) << "draft " << draft << ": chi-square " << chi << " with " << df << " df";
  }
}

// Against the exact target: softmax(logits / T) over a small vocabulary.
TEST(SpecSampling, DraftMatchesTheExactTarget) {
  const std::vector<float> logits = {0.5f, 1.5f, -0.3f, 1.0f, 0.0f, 0.8f};
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 0;
  p.top_p = 1.f;
  p.min_p = 0.f;
  std::vector<double> want(logits.size());
  double z = 0;
  for (size_t i = 0; i < logits.size(); ++i) z += want[i] = std::exp(logits[i] / p.temperature);
  constexpr int kDraws = 30000;
  std::vector<int> counts(logits.size());
  for (int i = 0; i < kDraws; ++i) {
    p.seed = static_cast<uint64_t>(i);
    Sampler s(p);
    counts[static_cast<size_t>(s.sample(logits, {}, 1))]++;  // the most likely token proposed
  }
  double chi = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double e = kDraws * want[i] / z;
    chi += (counts[i] - e) * (counts[i] - e) / e;
  }
  EXPECT_LT(chi, chi_square_999(static_cast<int>(logits.size()) - 1)) << "chi-square " << chi;
}

// The engine: the first three tokens of a sampled request (top-k 4), over
// 600 seeds with speculation and 600 without. The proposer proposes, for
// each context, the token most often seen there without speculation, so
// proposals are accepted often and rejected often.
class TableProposer final : public Proposer {
 public:
  explicit TableProposer(std::map<std::vector<int32_t>, int32_t> next) : next_(std::move(next)) {}
  std::vector<int32_t> propose(RequestId /*id*/, std::span<const int32_t> tokens, int32_t num_prompt,
                               int32_t max_tokens) override {
    std::vector<int32_t> context(tokens.begin() + num_prompt, tokens.end()), out;
    while (static_cast<int32_t>(out.size()) < max_tokens) {
      auto it = next_.find(context);
      if (it == next_.end()) break;
      out.push_back(it->second);
      context.push_back(it->second);
    }
    return out;
  }

 private:
  std::map<std::vector<int32_t>, int32_t> next_;
};

constexpr int kSampledRuns = 600;

// kSampledRuns sampled requests (top-k 4, temperature 2) of three tokens.
std::vector<GenerateRequest> sampled_requests(int first_seed) {
  std::vector<GenerateRequest> out;
  for (int i = 0; i < kSampledRuns; ++i) {
    GenerateRequest g;
    g.prompt_tokens = {1, 403, 407, 261, 378};
    g.max_tokens = 3;
    g.ignore_eos = true;
    g.sampling.temperature = 2.0f;
    g.sampling.top_k = 4;
    g.sampling.top_p = 1.f;
    g.sampling.min_p = 0.f;
    g.sampling.seed = static_cast<uint64_t>(first_seed + i);
    out.push_back(g);
  }
  return out;
}

TEST(SpecSampling, EngineOutputFollowsTheTargetDistribution) {
  auto off = make_engine(EngineConfig{});
  std::map<std::vector<int32_t>, int> without, with;
  std::map<std::vector<int32_t>, std::map<int32_t, int>> seen;
  for (const Output& o : run_all(*off, sampled_requests(0))) {
    without[o.tokens]++;
    for (size_t j = 1; j < o.tokens.size(); ++j)
      seen[std::vector<int32_t>(o.tokens.begin(), o.tokens.begin() + static_cast<std::ptrdiff_t>(j))][o.tokens[j]]++;
  }
  std::map<std::vector<int32_t>, int32_t> table;
  for (const auto& [context, counts] : seen) {
    auto best = std::max_element(counts.begin(), counts.end(), [](auto& a, auto& b) { return a.second < b.second; });
    table[context] = best->first;
  }
  auto on = make_engine(speculating(EngineConfig{}, std::make_shared<TableProposer>(table), 2));
  for (const Output& o : run_all(*on, sampled_requests(kSampledRuns))) with[o.tokens]++;
  const EngineMetrics m = on->metrics();
  EXPECT_GT(m.num_spec_accepted, m.num_spec_proposed / 5);
  EXPECT_LT(m.num_spec_accepted, m.num_spec_proposed);
  int df = 0;
  const double chi = two_sample_chi_square(without, with, &df);
  EXPECT_GE(df, 5);
  EXPECT_LT(chi, chi_square_999(df)) << "chi-square " << chi << " with " << df << " df";
  expect_pool_whole(*on);
}

// A draft model proposes its argmax (engine/spec/draft_proposer.h): here the
// target itself, whose mode is accepted with its probability under the
// request's sampler (top-k 4 at temperature 2: often, not always), so the
// output is drawn through both branches of the rejection rule.
TEST(SpecSampling, EngineOutputWithADraftModelFollowsTheTargetDistribution) {
  auto off = make_engine(EngineConfig{});
  std::map<std::vector<int32_t>, int> without, with;
  for (const Output& o : run_all(*off, sampled_requests(0))) without[o.tokens]++;
  auto target = Model::load(test::shared_path("models/stories260K.gguf"));
  std::shared_ptr<Proposer> draft =
      DraftProposer::create(Model::load(test::shared_path("models/stories260K.gguf")), *target, "stories260K.gguf",
                            "stories260K.gguf", DraftProposerConfig{.max_seqs = 64});
  auto on = make_engine(speculating(EngineConfig{}, draft, 2));
  for (const Output& o : run_all(*on, sampled_requests(kSampledRuns))) with[o.tokens]++;
  const EngineMetrics m = on->metrics();
  EXPECT_GT(m.num_spec_accepted, m.num_spec_proposed / 5);
  EXPECT_LT(m.num_spec_accepted, m.num_spec_proposed);
  int df = 0;
  const double chi = two_sample_chi_square(without, with, &df);
  EXPECT_GE(df, 5);
  EXPECT_LT(chi, chi_square_999(df)) << "chi-square " << chi << " with " << df << " df";
  expect_pool_whole(*on);
}

}  // namespace kvlm::speculative_test
