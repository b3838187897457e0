// The engine's side of slot files (engine_slots.cpp): a finished request's
// cached blocks exported, the prefix cache flushed, the records imported,
// and the same request served from them with the same tokens; an import the
// pool has no room for, or of records that are not their chain, loads
// nothing; forgetting a chain leaves nothing of it cached. The pool is whole
// after each.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <thread>

#include "common/error.h"
#include "engine/engine.h"
#include "model/model.h"
#include "runner/kv_storage.h"
#include "support/engine_support.h"
#include "support/test_support.h"
#include "tokenizer/tokenizer.h"

namespace kvlm::prefix_files_test {

constexpr int32_t kBlock = 16;

std::unique_ptr<Engine> make_engine(EngineConfig config = {}) {
  auto model = Model::load(test::shared_path("models/stories260K.gguf"));
  auto tok = Tokenizer::from_metadata(model->gguf().metadata());
  return std::make_unique<Engine>(std::move(model), std::move(tok), config);
}

struct Ran {
  std::vector<int32_t> tokens;
  int32_t num_cached = 0;
};

// A greedy request of `prompt` for 8 tokens, run to its end.
Ran run(Engine& engine, const std::vector<int32_t>& prompt) {
  GenerateRequest g;
  g.prompt_tokens = prompt;
  g.max_tokens = 8;
  g.ignore_eos = true;
  g.sampling.temperature = 0.f;
  auto stream = engine.submit(g);
  Ran r;
  while (auto ev = stream->next()) {
    if (ev->error) ADD_FAILURE() << ev->error->what();
    r.tokens.insert(r.tokens.end(), ev->tokens.begin(), ev->tokens.end());
  }
  r.num_cached = stream->stats().num_cached_tokens;
  return r;
}

std::vector<int32_t> prompt_of(int num_tokens, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> p = {1};
  while (static_cast<int>(p.size()) < num_tokens) p.push_back(3 + static_cast<int32_t>(rng() % 509));
  return p;
}

using test::expect_pool_whole;

std::vector<int32_t> joined(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

int32_t num_cached(Engine& engine, const std::vector<int32_t>& tokens) {
  return engine.cached_prefix_tokens({{tokens, 0}}).get().at(0);
}

TEST(EnginePrefixFiles, ExportedBlocksImportedAfterAFlushServeTheSameRequest) {
  auto engine = make_engine();
  const std::vector<int32_t> prompt = prompt_of(70, 1);
  const Ran cold = run(*engine, prompt);
  const std::vector<int32_t> ran = joined(prompt, cold.tokens);
  // The last output token's KV was never computed: (70 + 8 - 1) / 16 blocks.
  std::vector<KvRecord> records = engine->export_prefix(ran, 0).get();
  ASSERT_EQ(records.size(), 4u);
  EXPECT_FALSE(records[0].parent.has_value());
  EXPECT_EQ(records[1].parent, records[0].hash);
  ASSERT_TRUE(engine->reset_prefix_cache().get());
  EXPECT_EQ(num_cached(*engine, ran), 0);
  EXPECT_TRUE(engine->export_prefix(ran, 0).get().empty());
  EXPECT_EQ(engine->import_prefix(std::move(records)).get(), 4);
  EXPECT_EQ(num_cached(*engine, ran), 4 * kBlock);
  const Ran warm = run(*engine, prompt);
  EXPECT_EQ(warm.num_cached, 4 * kBlock) << "the prompt's 4 full blocks (69 tokens before its last)";
  EXPECT_EQ(warm.tokens, cold.tokens);
  expect_pool_whole(*engine);
}

TEST(EnginePrefixFiles, AnImportThePoolHasNoRoomForLoadsNothing) {
  EngineConfig c;
  c.kv_tokens = 8 * kBlock;
  c.max_model_len = 8 * kBlock;
  auto engine = make_engine(c);
  const std::vector<int32_t> prompt = prompt_of(40, 2);
  const Ran first = run(*engine, prompt);
  const std::vector<int32_t> ran = joined(prompt, first.tokens);
  const int32_t cached_before = num_cached(*engine, ran);
  ASSERT_GT(cached_before, 0);
  // A chain of 9 blocks: more than the whole pool.
  const std::vector<int32_t> long_tokens = prompt_of(9 * kBlock, 3);
  const std::vector<BlockHash> hashes = hash_full_blocks(long_tokens, kBlock);
  const size_t block_bytes = KvStorage::bytes_per_block(engine->model(), c.kv_dtype, kBlock);
  std::vector<KvRecord> records;
  for (size_t i = 0; i < hashes.size(); ++i) {
    KvRecord& r = records.emplace_back();
    r.hash = hashes[i];
    if (i > 0) r.parent = hashes[i - 1];
    r.tokens.assign(long_tokens.begin() + static_cast<ptrdiff_t>(i) * kBlock,
                    long_tokens.begin() + static_cast<ptrdiff_t>(i + 1) * kBlock);
    r.payload.resize(block_bytes);
  }
  try {
    engine->import_prefix(records).get();
    ADD_FAILURE() << "an import past the pool was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable) << e.what();
  }
  EXPECT_EQ(num_cached(*engine, long_tokens), 0);
  EXPECT_EQ(num_cached(*engine, ran), cached_before) << "nothing was evicted for it";
  // Records that are not their chain: refused before the pool is touched.
  records.resize(2);
  records[1].tokens[0] ^= 1;
  try {
    engine->import_prefix(records).get();
    ADD_FAILURE() << "a broken chain was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
  }
  EXPECT_EQ(num_cached(*engine, long_tokens), 0);
  expect_pool_whole(*engine);
}

TEST(EnginePrefixFiles, ForgettingAChainLeavesNothingOfItCached) {
  auto engine = make_engine();
  const std::vector<int32_t> prompt = prompt_of(50, 4);
  const Ran cold = run(*engine, prompt);
  const std::vector<int32_t> ran = joined(prompt, cold.tokens);
  ASSERT_EQ(num_cached(*engine, ran), 3 * kBlock);
  EXPECT_EQ(engine->forget_prefix(ran, 0).get(), 3);
  EXPECT_EQ(num_cached(*engine, ran), 0);
  EXPECT_EQ(run(*engine, prompt).num_cached, 0);
  expect_pool_whole(*engine);
}

}  // namespace kvlm::prefix_files_test
