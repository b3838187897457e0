// The draft-model proposer (engine/spec/draft_proposer.h) on synth-tiny: the F32
// model is the target, its Q4_0 quantization (the same weights: its argmax
// agrees often, not always) or the target itself (it agrees always) the
// draft. Greedy output is token for token what the engine gives without
// proposals (alone, batched, chunked, preempted); proposals are accepted, so
// the tests cannot pass with a proposer that proposes nothing; a rejected
// tail is rolled back in the draft's KV; the draft keeps state for at most
// max_seqs sequences and none once requests end; another vocabulary (the
// 32,000 tokens of llama-2-tiny-random; stories260K and the synth models
// share one vocabulary of 512) is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <thread>

#include "common/error.h"
#include "engine/spec/draft_proposer.h"
#include "engine/engine.h"
#include "model/make_model.h"
#include "model/model.h"
#include "support/test_support.h"
#include "tokenizer/tokenizer.h"

namespace kvlm::draft_proposer_test {

const char* const kTarget = "models/synth-tiny-F32.gguf";
const char* const kQuantized = "models/synth-tiny-Q4_0.gguf";

std::unique_ptr<DraftProposer> make_draft(const Model& target, const char* draft_file,
                                          DraftProposerConfig config = {}) {
  return DraftProposer::create(Model::load(test::shared_path(draft_file)), target, draft_file, kTarget, config);
}

// An engine over the target; draft_file: speculating with that draft, K
// proposals a step (0: adaptive).
std::unique_ptr<Engine> make_target_engine(EngineConfig config, const char* draft_file = nullptr, int32_t k = 4) {
  auto model = Model::load(test::shared_path(kTarget));
  if (draft_file) {
    config.speculative.mode = SpeculateMode::kDraft;
    config.speculative.proposer = make_draft(*model, draft_file);
    config.speculative.num_spec_tokens = k;
  }
  auto tok = Tokenizer::from_metadata(model->gguf().metadata());
  return std::make_unique<Engine>(std::move(model), std::move(tok), config);
}

// Greedy requests: BOS and random tokens; every third may stop at an end
// token, every fourth asks for logprobs.
std::vector<GenerateRequest> draft_requests(int n, uint32_t seed, int32_t vocab) {
  std::mt19937 rng(seed);
  std::vector<GenerateRequest> out;
  for (int i = 0; i < n; ++i) {
    GenerateRequest g;
    g.prompt_tokens = {1};
    const int extra = 1 + static_cast<int>(rng() % 40);
    for (int k = 0; k < extra; ++k) g.prompt_tokens.push_back(3 + static_cast<int32_t>(rng() % (vocab - 3)));
    g.max_tokens = 8 + static_cast<int32_t>(rng() % 40);
    g.sampling.temperature = 0.f;
    g.ignore_eos = i % 3 != 0;
    if (i % 4 == 1) g.logprobs = 2;
    out.push_back(g);
  }
  return out;
}

struct DraftOutput {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::optional<FinishReason> reason;
  bool operator==(const DraftOutput&) const = default;
};

std::vector<DraftOutput> run_requests(Engine& engine, const std::vector<GenerateRequest>& requests) {
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& g : requests) streams.push_back(engine.submit(g));
  std::vector<DraftOutput> out;
  for (auto& s : streams) {
    DraftOutput o;
    while (auto ev = s->next()) {
      if (ev->error) ADD_FAILURE() << "request failed: " << ev->error->what();
      o.tokens.insert(o.tokens.end(), ev->tokens.begin(), ev->tokens.end());
      for (const auto& lp : ev->logprobs) o.logprobs.push_back(lp.chosen.logprob);
      if (ev->finished) o.reason = ev->finish_reason;
    }
    out.push_back(std::move(o));
  }
  return out;
}

// Waits for the step after the last request's end to publish the metrics.
EngineMetrics settled_metrics(Engine& engine) {
  for (int i = 0; i < 200; ++i) {
    const EngineMetrics m = engine.metrics();
    if (m.num_kv_blocks_used == 0 && m.num_spec_draft_seqs == 0) return m;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return engine.metrics();
}

class DraftGreedy : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto engine = make_target_engine(EngineConfig{});
    requests_ = draft_requests(16, 7, engine->model().config().vocab_size);
    baseline_ = run_requests(*engine, requests_);
  }
  // Runs the first num_requests requests all at once, checks them against
  // the baseline, that the pool is whole and that the draft keeps nothing.
  static EngineMetrics check(const EngineConfig& config, const char* draft_file, int32_t k,
                             size_t num_requests = requests_.size()) {
    auto engine = make_target_engine(config, draft_file, k);
    const std::vector<GenerateRequest> requests(requests_.begin(), requests_.begin() + num_requests);
    const std::vector<DraftOutput> got = run_requests(*engine, requests);
    for (size_t i = 0; i < requests.size(); ++i) EXPECT_EQ(got[i], baseline_[i]) << "request " << i;
    const EngineMetrics m = settled_metrics(*engine);
    EXPECT_EQ(m.num_kv_blocks_used, 0) << "blocks still referenced after every request ended";
    EXPECT_EQ(m.num_spec_draft_seqs, 0) << "the draft keeps KV for requests that ended";
    EXPECT_EQ(m.spec_draft_kv_bytes, 0);
    EXPECT_GT(m.spec_propose_s, 0) << "the draft's passes went untimed";
    EXPECT_LT(m.spec_propose_s, m.step_times.schedule_s + 1e-9) << "proposals are part of the schedule phase";
    return m;
  }
  static std::vector<GenerateRequest> requests_;
  static std::vector<DraftOutput> baseline_;
};
std::vector<GenerateRequest> DraftGreedy::requests_;
std::vector<DraftOutput> DraftGreedy::baseline_;

TEST_F(DraftGreedy, QuantizedDraftBatchedEqualsOff) {
  const EngineMetrics m = check(EngineConfig{}, kQuantized, 4);
  EXPECT_GT(m.num_spec_accepted, 0) << "the Q4_0 draft of the same weights must agree sometimes";
  EXPECT_GT(m.num_generated_tokens, m.num_steps) << "accepted proposals save steps";
}

TEST_F(DraftGreedy, QuantizedDraftAloneEqualsOff) {
  const EngineMetrics m = check(EngineConfig{}, kQuantized, 4, 1);
  EXPECT_GT(m.num_spec_accepted, 0);
}

TEST_F(DraftGreedy, TargetAsDraftIsAlwaysAccepted) {
  std::vector<GenerateRequest> requests = requests_;
  for (auto& g : requests) g.ignore_eos = true;
  auto off = make_target_engine(EngineConfig{});
  const std::vector<DraftOutput> want = run_requests(*off, requests);
  auto on = make_target_engine(EngineConfig{}, kTarget, 4);
  EXPECT_EQ(run_requests(*on, requests), want);
  const EngineMetrics m = settled_metrics(*on);
  EXPECT_GT(m.num_spec_proposed, 0);
  // The draft's logits are the target's, bit for bit (batch invariance): its
  // argmax is the greedy token every time.
  EXPECT_EQ(m.num_spec_accepted, m.num_spec_proposed);
}

TEST_F(DraftGreedy, ChunkedEqualsOff) {
  EngineConfig c;
  c.max_batched_tokens = 9;  // prompts in chunks beside verifications
  EXPECT_GT(check(c, kQuantized, 5).num_spec_accepted, 0);
}

TEST_F(DraftGreedy, PreemptedEqualsOff) {
  EngineConfig c;
  c.kv_tokens = 16 * 8;  // 8 blocks for 16 requests: preemptions
  const EngineMetrics m = check(c, kQuantized, 4);
  EXPECT_GT(m.num_preemptions, 0);
  EXPECT_GT(m.num_spec_accepted, 0);
}

TEST_F(DraftGreedy, AdaptiveEqualsOff) {
  EXPECT_GT(check(EngineConfig{}, kQuantized, 0).num_spec_accepted, 0);
}

// Every architecture drafting for itself (Gemma-2's two KV groups, one a
// sliding window; GPT-2's learned positions; Qwen2's biases; a 32,000
// vocabulary): the draft's slots give the target's logits, so every
// proposal is accepted and the output is the output without proposals.
class DraftEveryModel : public ::testing::TestWithParam<const char*> {};

TEST_P(DraftEveryModel, SelfDraftIsAlwaysAcceptedAndEqualsOff) {
  auto load_engine = [&](bool draft) {
    auto model = Model::load(test::shared_path(GetParam()));
    EngineConfig c;
    if (draft) {
      c.speculative.proposer = DraftProposer::create(Model::load(test::shared_path(GetParam())), *model, GetParam(),
                                                     GetParam(), DraftProposerConfig{.max_seqs = 4, .max_tokens = 256});
      c.speculative.num_spec_tokens = 3;
    }
    auto tok = Tokenizer::from_metadata(model->gguf().metadata());
    return std::make_unique<Engine>(std::move(model), std::move(tok), c);
  };
  auto off = load_engine(false);
  std::vector<GenerateRequest> requests = draft_requests(6, 23, off->model().config().vocab_size);
  for (auto& g : requests) g.ignore_eos = true;
  const std::vector<DraftOutput> want = run_requests(*off, requests);
  auto on = load_engine(true);
  EXPECT_EQ(run_requests(*on, requests), want);
  const EngineMetrics m = settled_metrics(*on);
  EXPECT_GT(m.num_spec_proposed, 0);
  EXPECT_EQ(m.num_spec_accepted, m.num_spec_proposed);
  EXPECT_EQ(m.num_spec_draft_seqs, 0);
}

INSTANTIATE_TEST_SUITE_P(Shared, DraftEveryModel,
                         ::testing::Values("models/stories260K.gguf", "models/llama-2-tiny-random.gguf",
                                           "models/synth-gemma2-F32.gguf", "models/synth-qwen2-F32.gguf",
                                           "models/synth-gpt2-F16.gguf"));

TEST(DraftProposer, RefusesAnotherVocabulary) {
  auto target = Model::load(test::shared_path(kTarget));
  try {
    make_draft(*target, "models/llama-2-tiny-random.gguf");
    FAIL() << "a draft with another vocabulary was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    const std::string what = e.what();
    EXPECT_NE(what.find("llama-2-tiny-random.gguf"), std::string::npos) << what;
    EXPECT_NE(what.find("32000"), std::string::npos) << what;
    EXPECT_NE(what.find("synth-tiny-F32.gguf"), std::string::npos) << what;
    EXPECT_NE(what.find("vocabularies differ"), std::string::npos) << what;
  }
}

// A small model on stories260K's 512 tokens whose table and token list are
// padded to 640 ids, as model families pad theirs to other multiples.
std::string padded_model() {
  static const std::string path = [] {
    MakeModelOptions o;
    o.shape.dim = 64;
    o.shape.num_layers = 2;
    o.shape.num_heads = 4;
    o.shape.num_kv_heads = 4;
    o.shape.ffn_dim = 128;
    o.shape.context_length = 256;
    o.shape.vocab_size = 640;
    o.type = DType::kF32;
    o.weight_std = 0.3f;
    o.vocab_from = test::shared_path("models/stories260K.gguf");
    o.out_path = test::temp_dir() + "/draft-padded-640.gguf";
    make_model(o, [](const std::string&) {});
    return o.out_path;
  }();
  return path;
}

// 512 and 640 ids, the same tokens below 512: accepted both ways. Proposals
// stay below 512; a sequence the 640-id target has taken past 512 gets no
// more (the draft has no row for the id), and the output is unchanged.
TEST(DraftProposer, PaddedVocabulariesDraftForEachOther) {
  auto small = Model::load(test::shared_path(kTarget));
  auto draft = DraftProposer::create(Model::load(padded_model()), *small, "padded", kTarget, {});
  for (int32_t first = 3; first < 300; first += 37) {
    const std::vector<int32_t> proposals = draft->propose(RequestId(first), std::vector<int32_t>{1, first, 7}, 3, 6);
    ASSERT_EQ(proposals.size(), 6u);
    for (int32_t t : proposals) EXPECT_LT(t, 512) << "a padding id proposed";
  }

  auto load_padded = [](bool speculate) {
    auto model = Model::load(padded_model());
    EngineConfig c;
    if (speculate) {
      c.speculative.proposer = DraftProposer::create(Model::load(test::shared_path(kQuantized)), *model, kQuantized,
                                                     "padded", DraftProposerConfig{.max_seqs = 8, .max_tokens = 256});
      c.speculative.num_spec_tokens = 3;
    }
    auto tok = Tokenizer::from_metadata(model->gguf().metadata());
    return std::make_unique<Engine>(std::move(model), std::move(tok), c);
  };
  std::vector<GenerateRequest> requests = draft_requests(8, 31, 512);
  for (auto& g : requests) g.ignore_eos = true, g.max_tokens = 48;
  auto off = load_padded(false);
  const std::vector<DraftOutput> want = run_requests(*off, requests);
  bool past_512 = false;
  for (const DraftOutput& o : want)
    past_512 = past_512 || std::any_of(o.tokens.begin(), o.tokens.end(), [](int32_t t) { return t >= 512; });
  EXPECT_TRUE(past_512) << "no output reached the padded ids: the guard went untested";
  auto on = load_padded(true);
  EXPECT_EQ(run_requests(*on, requests), want);
  const EngineMetrics m = settled_metrics(*on);
  EXPECT_GT(m.num_spec_proposed, 0);
  EXPECT_EQ(m.num_spec_draft_seqs, 0);
}

// A small model on the tokenizer of one of ../shared/vocab's files.
// padded_to: the table's size (unset: the tokenizer's).
std::unique_ptr<Model> model_on_vocab(const std::string& vocab, std::optional<int32_t> padded_to = std::nullopt) {
  MakeModelOptions o;
  o.shape.dim = 32;
  o.shape.num_layers = 1;
  o.shape.num_heads = 2;
  o.shape.num_kv_heads = 2;
  o.shape.ffn_dim = 32;
  o.shape.context_length = 64;
  o.shape.vocab_size = padded_to;
  o.type = DType::kF16;
  o.vocab_from = test::shared_path("vocab/ggml-vocab-" + vocab + ".gguf");
  o.out_path = test::temp_dir() + "/draft-vocab-" + vocab + std::to_string(padded_to.value_or(0)) + ".gguf";
  make_model(o, [](const std::string&) {});
  return Model::load(o.out_path);
}

std::string refusal(const Model& target, std::unique_ptr<Model> draft) {
  try {
    DraftProposer::create(std::move(draft), target, "draft.gguf", "target.gguf", {});
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
  return "accepted";
}

// Vocabularies of the same or close sizes that are not one tokenizer:
// deepseek-coder's 32,256 BPE tokens against llama's 32,000 SPM ones padded
// to 32,256 (the texts differ), phi-3's 32,064 against llama's (the same
// texts below 32,000, but its own end token).
TEST(DraftProposer, RefusesCloseSizedVocabulariesThatDiffer) {
  auto llama = model_on_vocab("llama-spm");
  const std::string deepseek = refusal(*model_on_vocab("llama-spm", 32256), model_on_vocab("deepseek-coder"));
  EXPECT_NE(deepseek.find("in the draft and"), std::string::npos) << deepseek;
  const std::string phi3 = refusal(*llama, model_on_vocab("phi-3"));
  EXPECT_NE(phi3.find("EOS"), std::string::npos) << phi3;
}

TEST(DraftProposer, EngineRefusesDraftModeWithoutADraft) {
  EngineConfig c;
  c.speculative.mode = SpeculateMode::kDraft;
  EXPECT_THROW(make_target_engine(c), Error);
}

// A rejected tail is rolled back: after proposing, the tokens lose the last
// proposals and gain another token; the proposals then are those of a fresh
// proposer that computes the same tokens from scratch.
TEST(DraftProposer, RollsBackToTheCommonPrefix) {
  auto target = Model::load(test::shared_path(kTarget));
  auto kept = make_draft(*target, kQuantized);
  std::vector<int32_t> tokens = {1, 40, 71, 9, 300, 12};
  const std::vector<int32_t> first = kept->propose(RequestId(1), tokens, 6, 5);
  ASSERT_EQ(first.size(), 5u);
  // Two proposals accepted, the third replaced by the target's own token.
  tokens.insert(tokens.end(), first.begin(), first.begin() + 2);
  tokens.push_back((first[2] + 1) % target->config().vocab_size);
  const std::vector<int32_t> next = kept->propose(RequestId(1), tokens, 6, 5);
  auto fresh = make_draft(*target, kQuantized);
  EXPECT_EQ(next, fresh->propose(RequestId(1), tokens, 6, 5));
  // Called again with nothing new (no proposal was scheduled): the same.
  EXPECT_EQ(kept->propose(RequestId(1), tokens, 6, 5), next);
  EXPECT_EQ(kept->num_sequences(), 1);
}

// One forward pass per draft position for every sequence gives what each
// sequence alone gives (the rows of a batch do not see each other): with
// catch-ups of different lengths, different K, and a second round in which
// some lost proposals and some kept them.
TEST(DraftProposer, BatchEqualsOneAtATime) {
  auto target = Model::load(test::shared_path(kTarget));
  auto batched = make_draft(*target, kQuantized);
  std::vector<std::vector<int32_t>> tokens = {{1, 40, 71, 9, 300, 12}, {1, 7}, {1, 99, 98, 97, 96, 95, 94, 93, 92}};
  const std::vector<int32_t> ks = {5, 1, 3};
  for (int round = 0; round < 2; ++round) {
    std::vector<ProposalQuery> queries;
    for (size_t i = 0; i < tokens.size(); ++i)
      queries.push_back(ProposalQuery{RequestId(static_cast<int64_t>(i)), tokens[i], 1, ks[i]});
    const std::vector<std::vector<int32_t>> got = batched->propose_batch(queries);
    ASSERT_EQ(got.size(), tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) {
      auto alone = make_draft(*target, kQuantized);
      EXPECT_EQ(got[i], alone->propose(RequestId(7), tokens[i], 1, ks[i])) << "round " << round << ", sequence " << i;
      ASSERT_EQ(static_cast<int32_t>(got[i].size()), ks[i]);
      // Next round: sequence 0 keeps one proposal and then differs, 1 keeps
      // its proposal, 2 keeps none.
      if (i == 0) tokens[i].insert(tokens[i].end(), {got[i][0], (got[i][1] + 1) % 512});
      if (i == 1) tokens[i].push_back(got[i][0]);
      if (i == 2) tokens[i].push_back((got[i][0] + 3) % 512);
    }
  }
}

TEST(DraftProposer, HoldsAtMostMaxSeqsAndReleases) {
  auto target = Model::load(test::shared_path(kTarget));
  auto draft = make_draft(*target, kQuantized, DraftProposerConfig{.max_seqs = 2, .max_tokens = 64});
  const std::vector<int32_t> tokens = {1, 5, 6, 7};
  EXPECT_EQ(draft->propose(RequestId(1), tokens, 4, 3).size(), 3u);
  EXPECT_EQ(draft->propose(RequestId(2), tokens, 4, 3).size(), 3u);
  EXPECT_TRUE(draft->propose(RequestId(3), tokens, 4, 3).empty()) << "a third sequence past max_seqs 2";
  EXPECT_EQ(draft->num_sequences(), 2);
  EXPECT_EQ(draft->kv_bytes(), 2 * draft->seq_kv_bytes());
  EXPECT_GT(draft->seq_kv_bytes(), 0);
  draft->release(RequestId(1));
  draft->release(RequestId(99));  // unknown: no-op
  EXPECT_EQ(draft->propose(RequestId(3), tokens, 4, 3).size(), 3u);
  // Past the 64 tokens of a sequence's KV: fewer proposals, then none, and
  // the slot is free again.
  const std::vector<int32_t> long_tokens(62, 5);
  EXPECT_EQ(draft->propose(RequestId(2), long_tokens, 4, 8).size(), 3u);
  EXPECT_TRUE(draft->propose(RequestId(2), std::vector<int32_t>(65, 5), 4, 8).empty());
  EXPECT_EQ(draft->num_sequences(), 1) << "a sequence past its slot's room must give the slot back";
  draft->release(RequestId(3));
  EXPECT_EQ(draft->num_sequences(), 0);
  EXPECT_EQ(draft->kv_bytes(), 0);
}

}  // namespace kvlm::draft_proposer_test
