// KV chunks in the engine (kv/kv_chunks.h, docs/kv-chunks.md): documents
// marked as chunks are computed alone once and reused wherever they stand.
// Recomputing every reused token (share 1) is bit-equal to a full prefill, as
// is reusing a chunk where it was computed (right after BOS) with nothing
// recomputed; salts and adapters never share a chunk; an evicted chunk is
// computed again; chunk KV comes back from the disk tier after a restart.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "engine/engine.h"
#include "model/model.h"
#include "kv/block_hash.h"
#include "support/engine_support.h"
#include "support/lora_fixture.h"
#include "support/test_support.h"
#include "unit/kvstore/kvstore_test_util.h"
#include "tokenizer/tokenizer.h"

namespace kvlm::kv_chunks_engine_test {

// stories260K: real weights, so a blend's output is a story's.
constexpr const char* kModel = "models/stories260K.gguf";

std::unique_ptr<Engine> chunk_engine(EngineConfig config = {}) {
  auto model = Model::load(test::shared_path(kModel));
  auto tok = Tokenizer::from_metadata(model->gguf().metadata());
  return std::make_unique<Engine>(std::move(model), std::move(tok), config);
}

struct Output {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  RequestStats stats;
};

Output run(Engine& engine, GenerateRequest g) {
  auto stream = engine.submit(std::move(g));
  Output o;
  while (auto ev = stream->next()) {
    o.tokens.insert(o.tokens.end(), ev->tokens.begin(), ev->tokens.end());
    for (const SampledLogprobs& lp : ev->logprobs) o.logprobs.push_back(lp.chosen.logprob);
    if (ev->error) ADD_FAILURE() << "request failed: " << ev->error->what();
  }
  o.stats = stream->stats();
  return o;
}

using test::expect_pool_whole;

// A RAG-shaped prompt: BOS, the documents in the given order, a question.
struct RagPrompt {
  std::vector<int32_t> tokens;
  std::vector<TokenSpan> chunks;
};

class Docs {
 public:
  explicit Docs(uint32_t seed) : rng_(seed) {
    for (int n : {37, 50, 29, 44}) docs_.push_back(tokens(n));
    question_ = tokens(9);
  }
  RagPrompt prompt(std::initializer_list<int> order) {
    RagPrompt p;
    p.tokens = {1};
    for (int d : order) {
      const auto begin = static_cast<int32_t>(p.tokens.size());
      p.tokens.insert(p.tokens.end(), docs_[static_cast<size_t>(d)].begin(), docs_[static_cast<size_t>(d)].end());
      p.chunks.push_back({begin, static_cast<int32_t>(p.tokens.size())});
    }
    p.tokens.insert(p.tokens.end(), question_.begin(), question_.end());
    return p;
  }

 private:
  std::vector<int32_t> tokens(int n) {
    std::vector<int32_t> t;
    while (static_cast<int>(t.size()) < n) t.push_back(3 + static_cast<int32_t>(rng_() % 500));
    return t;
  }
  std::mt19937 rng_;
  std::vector<std::vector<int32_t>> docs_;
  std::vector<int32_t> question_;
};

GenerateRequest greedy(const RagPrompt& p, bool with_chunks, double share = -1) {
  GenerateRequest g;
  g.prompt_tokens = p.tokens;
  g.max_tokens = 12;
  g.sampling.temperature = 0.f;
  g.ignore_eos = true;
  g.logprobs = 0;
  if (with_chunks) g.kv_chunks = p.chunks;
  g.kv_blend_recompute = share;
  return g;
}

// The reference: the same prompt computed in full (its own salt: no hit).
Output full_prefill(Engine& engine, const RagPrompt& p) {
  GenerateRequest g = greedy(p, false);
  g.cache_salt = cache_salt_key("full prefill");
  return run(engine, g);
}

TEST(KvChunksEngine, ShareOneIsBitEqualToFullPrefill) {
  auto engine = chunk_engine();
  Docs docs(1);
  run(*engine, greedy(docs.prompt({0, 1, 2}), true));  // caches the chunks
  const RagPrompt p = docs.prompt({2, 0, 1});
  const Output blended = run(*engine, greedy(p, true, 1.0));
  const Output full = full_prefill(*engine, p);
  EXPECT_GT(blended.stats.num_chunk_reused_tokens, 0);
  EXPECT_EQ(blended.stats.num_chunk_recomputed_tokens, blended.stats.num_chunk_reused_tokens);
  EXPECT_EQ(blended.tokens, full.tokens);
  EXPECT_EQ(blended.logprobs, full.logprobs);  // bit for bit
  expect_pool_whole(*engine);
}

TEST(KvChunksEngine, ChunkWhereItWasComputedIsExactWithNothingRecomputed) {
  auto engine = chunk_engine();
  Docs docs(2);
  const RagPrompt p = docs.prompt({1});  // BOS then the chunk: its standalone context
  const Output blended = run(*engine, greedy(p, true, 0.0));
  // The chunk prompt BOS + 50 tokens has 3 whole blocks: 47 of its tokens come copied.
  EXPECT_EQ(blended.stats.num_chunk_reused_tokens, 47);
  EXPECT_EQ(blended.stats.num_chunk_recomputed_tokens, 0);
  // Its companion computed the chunk for it: nothing was cached before.
  EXPECT_EQ(blended.stats.num_cached_tokens, 0);
  const Output full = full_prefill(*engine, p);
  EXPECT_EQ(blended.tokens, full.tokens);
  EXPECT_EQ(blended.logprobs, full.logprobs);
  const Output again = run(*engine, greedy(p, true, 0.0));
  EXPECT_EQ(again.stats.num_cached_tokens, 47);
  EXPECT_EQ(again.logprobs, full.logprobs);
  expect_pool_whole(*engine);
}

TEST(KvChunksEngine, PartialShareRecomputesTheMostDeviatingShareDeterministically) {
  auto engine = chunk_engine();
  Docs docs(3);
  const RagPrompt p = docs.prompt({3, 1, 0, 2});
  const Output a = run(*engine, greedy(p, true, 0.15));
  const Output b = run(*engine, greedy(p, true, 0.15));
  const int32_t reused = a.stats.num_chunk_reused_tokens;
  EXPECT_GT(reused, 100);
  EXPECT_EQ(a.stats.num_chunk_recomputed_tokens, static_cast<int32_t>(std::ceil(0.15 * reused - 1e-9)));
  EXPECT_EQ(a.stats.num_cached_tokens, 0);  // its chunks were computed for it
  EXPECT_EQ(b.stats.num_cached_tokens, reused - b.stats.num_chunk_recomputed_tokens);
  // The blend depends on the prompt alone (chunks computed alone, the probe's
  // choice by value): the same tokens every time.
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.logprobs, b.logprobs);
  const EngineMetrics m = engine->metrics();
  EXPECT_EQ(m.num_kv_chunk_lookups, 8);
  EXPECT_EQ(m.num_kv_chunk_hits, 4);  // the second request's: cached before it came
  EXPECT_EQ(m.num_kv_chunk_reused_tokens, 2 * reused);
  expect_pool_whole(*engine);
}

TEST(KvChunksEngine, SaltsNeverShareAChunk) {
  auto engine = chunk_engine();
  Docs docs(4);
  const RagPrompt p = docs.prompt({0, 2});
  auto queried = [&] { return engine->metrics().num_prefix_query_tokens; };
  GenerateRequest tenant_a = greedy(p, true, 0.0);
  tenant_a.cache_salt = cache_salt_key("tenant a");
  run(*engine, tenant_a);
  // Again under its salt: the chunks are cached, so no companion runs and
  // only the prompt itself is looked up.
  int64_t before = queried();
  const Output a = run(*engine, tenant_a);
  EXPECT_EQ(queried() - before, static_cast<int64_t>(p.tokens.size()));
  EXPECT_GT(a.stats.num_chunk_reused_tokens, 0);
  // Under another salt nothing of tenant a's is found: both chunks are
  // computed again by their companions, whose chunk prompts (BOS and the
  // document, cut to whole blocks: 32 and 16 tokens) are looked up too.
  GenerateRequest tenant_b = greedy(p, true, 0.0);
  tenant_b.cache_salt = cache_salt_key("tenant b");
  before = queried();
  const Output b = run(*engine, tenant_b);
  EXPECT_EQ(queried() - before, static_cast<int64_t>(p.tokens.size()) + 32 + 16);
  EXPECT_EQ(b.stats.num_chunk_reused_tokens, a.stats.num_chunk_reused_tokens);
  EXPECT_EQ(b.tokens, a.tokens);  // the same KV, computed twice
  expect_pool_whole(*engine);
}

TEST(KvChunksEngine, AdaptersNeverShareAChunk) {
  auto engine = chunk_engine();
  Docs docs(9);
  const RagPrompt p = docs.prompt({0, 2});
  auto queried = [&] { return engine->metrics().num_prefix_query_tokens; };
  const auto a = test::random_lora(engine->model(), 4, test::llama_all_targets(), 1);
  const auto b = test::random_lora(engine->model(), 4, test::llama_all_targets(), 2);
  auto with = [&](std::shared_ptr<const LoraAdapter> adapter) {
    GenerateRequest g = greedy(p, true, 0.0);
    g.lora = std::move(adapter);
    const int64_t before = queried();
    const Output o = run(*engine, g);
    EXPECT_GT(o.stats.num_chunk_reused_tokens, 0);
    return std::make_pair(o, queried() - before);
  };
  const int64_t prompt = static_cast<int64_t>(p.tokens.size()), chunk_prompts = 32 + 16;
  EXPECT_EQ(with(nullptr).second, prompt + chunk_prompts);  // the base computes its chunks
  const auto [under_a, a_queried] = with(a);
  EXPECT_EQ(a_queried, prompt + chunk_prompts) << "adapter a found the base's chunks";
  EXPECT_EQ(with(a).second, prompt) << "adapter a's own chunks are cached";
  const auto [under_b, b_queried] = with(b);
  EXPECT_EQ(b_queried, prompt + chunk_prompts) << "adapter b found adapter a's chunks";
  EXPECT_NE(under_a.logprobs, under_b.logprobs);
  expect_pool_whole(*engine);
}

TEST(KvChunksEngine, ChunkEvictedBetweenRequestsIsComputedAgain) {
  EngineConfig small;
  small.kv_tokens = 16 * 12;  // 12 blocks: the second prompt's chunks push the first's out
  auto engine = chunk_engine(small);
  Docs docs(5);
  const RagPrompt first = docs.prompt({0});
  const Output a = run(*engine, greedy(first, true, 0.0));
  run(*engine, greedy(docs.prompt({1, 3}), true, 0.0));
  const Output again = run(*engine, greedy(first, true, 0.0));
  EXPECT_EQ(again.stats.num_chunk_reused_tokens, a.stats.num_chunk_reused_tokens);
  EXPECT_EQ(again.tokens, a.tokens);
  EXPECT_EQ(again.logprobs, a.logprobs);
  EXPECT_GT(engine->metrics().num_prefix_evicted_blocks, 0);
  expect_pool_whole(*engine);
}

TEST(KvChunksEngine, ChunkKvComesBackFromTheDiskTierAfterARestart) {
  const std::string dir = test::fresh_dir("kv-chunks-disk");
  EngineConfig config;
  config.tiers = TierStackConfig{};
  config.tiers->disk = DiskStoreConfig{dir, 0, Hash128{0x6b76, 0x63}};
  Docs docs(6);
  const RagPrompt p = docs.prompt({2, 1});
  Output before;
  {
    auto engine = chunk_engine(config);
    before = run(*engine, greedy(p, true, 0.3));
  }
  auto engine = chunk_engine(config);
  const Output after = run(*engine, greedy(p, true, 0.3));
  EXPECT_GT(engine->metrics().num_tier_hit_tokens, 0);
  EXPECT_EQ(after.stats.num_chunk_reused_tokens, before.stats.num_chunk_reused_tokens);
  EXPECT_EQ(after.tokens, before.tokens);
  EXPECT_EQ(after.logprobs, before.logprobs);
  expect_pool_whole(*engine);
}

// How kvlm bench chunks scores a continuation after blended documents.
TEST(KvChunksEngine, PromptLogprobsFromAPositionScoreOnlyTheTail) {
  auto engine = chunk_engine();
  Docs docs(8);
  const RagPrompt p = docs.prompt({1, 0});
  const auto from = static_cast<int32_t>(p.tokens.size()) - 9;  // the question
  auto scored = [&](bool chunks, double share, int32_t first) {
    GenerateRequest g = greedy(p, chunks, share);
    g.max_tokens = 1;
    g.prompt_logprobs = true;
    g.prompt_logprobs_from = first;
    if (!chunks) g.cache_salt = cache_salt_key("reference");  // its exact blocks serve no one else
    std::vector<float> lp;
    auto stream = engine->submit(g);
    while (auto ev = stream->next())
      for (const SampledLogprobs& l : ev->prompt_logprobs) lp.push_back(l.chosen.logprob);
    return std::make_pair(lp, stream->stats());
  };
  const auto [whole, whole_stats] = scored(false, -1, 0);
  ASSERT_EQ(whole.size(), p.tokens.size() - 1);
  const std::vector<float> tail(whole.end() - 8, whole.end());  // tokens from + 1 .. (the last has none)
  // Recomputing every reused token gives the full prefill's bits.
  const auto [exact, exact_stats] = scored(true, 1.0, from);
  EXPECT_EQ(exact, tail);
  EXPECT_GT(exact_stats.num_chunk_reused_tokens, 0);
  // With nothing recomputed the documents' KV is their standalone KV: close, not equal.
  const auto [reused, reused_stats] = scored(true, 0.0, from);
  ASSERT_EQ(reused.size(), tail.size());
  EXPECT_NE(reused, tail);
  EXPECT_EQ(reused_stats.num_cached_tokens, reused_stats.num_chunk_reused_tokens);
  expect_pool_whole(*engine);
}

TEST(KvChunksEngine, BadSpansAreRefused) {
  auto engine = chunk_engine();
  Docs docs(7);
  GenerateRequest g = greedy(docs.prompt({0, 1}), true);
  std::swap(g.kv_chunks[0], g.kv_chunks[1]);
  EXPECT_THROW(engine->submit(g), Error);
  g.kv_chunks = {{5, 5}};
  EXPECT_THROW(engine->submit(g), Error);
  g.kv_chunks = {{5, 500}};
  EXPECT_THROW(engine->submit(g), Error);
  g.kv_chunks = {{1, 10}};
  g.kv_blend_recompute = 1.5;
  EXPECT_THROW(engine->submit(g), Error);
}

}  // namespace kvlm::kv_chunks_engine_test
