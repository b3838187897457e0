// Embedding requests (GenerateRequest::pooling): the pooled vector is the
// model's own final hidden states (a one-pass reference), and the same bits
// whatever the batch, the prefill chunking, a prefix-cache hit or a
// preemption.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "engine/engine.h"
#include "model/model.h"
#include "runner/sequence_evaluator.h"
#include "support/test_support.h"
#include "tokenizer/tokenizer.h"

namespace kvlm::embed_test {

std::unique_ptr<Engine> make_engine(EngineConfig config = {}) {
  auto model = Model::load(test::shared_path("models/stories260K.gguf"));
  auto tok = Tokenizer::from_metadata(model->gguf().metadata());
  return std::make_unique<Engine>(std::move(model), std::move(tok), config);
}

std::vector<int32_t> prompt(int32_t length, int32_t salt) {
  std::vector<int32_t> p = {1};
  for (int32_t i = 1; i < length; ++i) p.push_back(3 + (i * 37 + salt * 11) % 500);
  return p;
}

GenerateRequest embed_request(std::vector<int32_t> tokens, Pooling pooling, bool normalize = true) {
  GenerateRequest g;
  g.prompt_tokens = std::move(tokens);
  g.max_tokens = 1;
  g.sampling.temperature = 0.f;
  g.pooling = pooling;
  g.normalize = normalize;
  return g;
}

std::vector<float> embedding(RequestStream& s) {
  while (auto ev = s.next())
    if (ev->error) ADD_FAILURE() << ev->error->what();
  return s.stats().embedding;
}

// Bit-for-bit equality (EXPECT_EQ on floats would pass -0 == 0).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The reference: one forward pass of the whole prompt, its rows pooled here.
std::vector<double> reference(const Model& model, const std::vector<int32_t>& tokens, Pooling pooling) {
  SequenceEvaluator eval(model, static_cast<int32_t>(tokens.size()));
  eval.eval(tokens, /*all_logits=*/true);
  const auto dim = static_cast<size_t>(model.config().dim);
  const std::vector<float>& h = eval.hidden();
  EXPECT_EQ(h.size(), tokens.size() * dim);
  std::vector<double> v(dim, 0.0);
  const size_t first = pooling == Pooling::kMean ? 0 : tokens.size() - 1;
  for (size_t r = first; r < tokens.size(); ++r)
    for (size_t i = 0; i < dim; ++i) v[i] += h[r * dim + i];
  for (double& x : v) x /= static_cast<double>(tokens.size() - first);
  return v;
}

TEST(EngineEmbed, PooledVectorsAreTheModelsFinalHiddenStates) {
  auto engine = make_engine();
  const std::vector<int32_t> tokens = prompt(70, 1);
  for (Pooling pooling : {Pooling::kMean, Pooling::kLast}) {
    const std::vector<double> want = reference(engine->model(), tokens, pooling);
    const std::vector<float> raw = embedding(*engine->submit(embed_request(tokens, pooling, /*normalize=*/false)));
    const std::vector<float> unit = embedding(*engine->submit(embed_request(tokens, pooling)));
    ASSERT_EQ(raw.size(), want.size());
    ASSERT_EQ(unit.size(), want.size());
    double norm = 0, unit_norm = 0;
    for (double x : want) norm += x * x;
    norm = std::sqrt(norm);
    for (float x : unit) unit_norm += static_cast<double>(x) * x;
    EXPECT_NEAR(unit_norm, 1.0, 1e-5);
    ASSERT_GT(norm, 0.1) << "a real hidden state, not zeros";
    for (size_t i = 0; i < want.size(); ++i) {
      // Same kernels, one pass vs the engine's: equal up to float rounding.
      EXPECT_NEAR(raw[i], want[i], 1e-4 * (1 + std::abs(want[i]))) << i;
      EXPECT_NEAR(unit[i], want[i] / norm, 1e-5) << i;
    }
  }
  EXPECT_EQ(engine->metrics().num_kv_blocks_used, 0);
}

// One prompt alone, among 15 others, chunked 16 tokens a step, after a
// prefix-cache hit (last pooling takes hits; mean computes it all): the
// same vector bits each time.
TEST(EngineEmbed, TheSameVectorBitsAloneInABatchChunkedOrCached) {
  for (Pooling pooling : {Pooling::kMean, Pooling::kLast}) {
    const std::vector<int32_t> tokens = prompt(90, 3);
    auto engine = make_engine();
    const std::vector<float> alone = embedding(*engine->submit(embed_request(tokens, pooling)));
    ASSERT_FALSE(alone.empty());

    std::vector<GenerateRequest> batch;
    for (int32_t i = 0; i < 16; ++i) batch.push_back(embed_request(i == 5 ? tokens : prompt(20 + 9 * i, i), pooling));
    auto streams = engine->submit_batch(std::move(batch), 1);
    std::vector<std::vector<float>> vectors;
    for (auto& s : streams) vectors.push_back(embedding(*s));
    EXPECT_TRUE(same_bits(vectors[5], alone)) << "in a batch of 16";
    EXPECT_FALSE(same_bits(vectors[4], alone));
    if (pooling == Pooling::kLast) { EXPECT_GT(streams[5]->stats().num_cached_tokens, 0) << "a prefix-cache hit"; }
    if (pooling == Pooling::kMean) { EXPECT_EQ(streams[5]->stats().num_cached_tokens, 0); }

    EngineConfig chunked;
    chunked.max_batched_tokens = 16;
    chunked.prefix_caching = false;
    auto small = make_engine(chunked);
    EXPECT_TRUE(same_bits(embedding(*small->submit(embed_request(tokens, pooling))), alone)) << "chunked";
  }
}

// A pool too small for everything at once: the embedding prompt, admitted
// last, is preempted part-way through its prefill (the newest running
// request goes first), starts over later, and its vector is still the same.
TEST(EngineEmbed, APreemptedPromptPoolsOnlyItsLastRun) {
  const std::vector<int32_t> tokens = prompt(100, 7);
  const std::vector<float> alone = embedding(*make_engine()->submit(embed_request(tokens, Pooling::kMean)));
  EngineConfig tight;
  tight.block_size = 4;
  tight.kv_tokens = 4 * 50;  // 3 x 40 generating + 100 embedding tokens do not fit
  tight.max_batched_tokens = 24;
  tight.prefix_caching = false;
  auto engine = make_engine(tight);
  std::vector<GenerateRequest> batch;
  for (int32_t i = 0; i < 3; ++i) {
    GenerateRequest g;
    g.prompt_tokens = prompt(40, 30 + i);
    g.max_tokens = 8;
    g.ignore_eos = true;
    batch.push_back(std::move(g));
  }
  batch.push_back(embed_request(tokens, Pooling::kMean));
  auto streams = engine->submit_batch(std::move(batch), 1);
  for (size_t i = 0; i < 3; ++i) embedding(*streams[i]);
  const std::vector<float> after = embedding(*streams[3]);
  ASSERT_GT(streams[3]->stats().num_preemptions, 0) << "the test needs the embedding prompt preempted";
  EXPECT_TRUE(same_bits(after, alone));
}

TEST(EngineEmbed, AnEmbeddingRequestGeneratesOneTokenAndTakesNoBudget) {
  auto engine = make_engine();
  GenerateRequest g = embed_request(prompt(10, 1), Pooling::kMean);
  g.max_tokens = 2;
  EXPECT_THROW(engine->submit(g), Error);
  g.max_tokens = 1;
  g.kv_budget = KvBudget{.budget_tokens = 32};
  const std::vector<float> v = embedding(*engine->submit(g));
  EXPECT_EQ(v.size(), static_cast<size_t>(engine->model().config().dim));
}

// The flag wins; else the model's pooling_type (llama.cpp's numbers); cls
// and rank are refused until a flag says what to do.
TEST(EngineEmbed, PoolingComesFromTheFlagThenTheModel) {
  ModelConfig c;
  EXPECT_EQ(choose_pooling(c, ""), Pooling::kLast);
  c.pooling_type = 1;
  EXPECT_EQ(choose_pooling(c, ""), Pooling::kMean);
  EXPECT_EQ(choose_pooling(c, "last"), Pooling::kLast);
  c.pooling_type = 3;
  EXPECT_EQ(choose_pooling(c, ""), Pooling::kLast);
  EXPECT_EQ(choose_pooling(c, "mean"), Pooling::kMean);
  for (int32_t type : {2, 4, 9}) {
    c.pooling_type = type;
    try {
      choose_pooling(c, "");
      ADD_FAILURE() << "pooling_type " << type << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
      EXPECT_NE(std::string(e.what()).find("--pooling"), std::string::npos) << e.what();
    }
    EXPECT_EQ(choose_pooling(c, "mean"), Pooling::kMean);
  }
  EXPECT_THROW(choose_pooling(c, "max"), Error);
}

}  // namespace kvlm::embed_test
