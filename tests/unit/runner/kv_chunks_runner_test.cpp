// KV chunks through the scheduler and the runner (kv/kv_chunks.h): a chunk
// computed alone is copied into a prompt at any offset, inside a block or
// across blocks, with its keys re-rotated to their new positions. Layer 0's
// K and V depend on the token and its position only, so there the copy must
// equal what the prompt computes in place; deeper layers keep the chunk's
// standalone KV (nothing is recomputed at share 0), so there they differ
// unless the chunk stands where it was computed.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend/cpu/attention.h"
#include "kv/block_hash.h"
#include "model/model.h"
#include "runner/model_runner.h"
#include "sched/scheduler.h"
#include "support/test_support.h"

namespace kvlm {
namespace {

constexpr int32_t kBlock = 16;

class ChunkRunner {
 public:
  explicit ChunkRunner(const Model& model)
      : sched_(SchedulerConfig{512, 8, 1024}, cache_config()),
        runner_(model, DType::kF32, kBlock, 128) {}

  // Queues a request that runs until finish().
  void add(int64_t id, std::vector<int32_t> tokens, uint64_t salt, std::vector<KvChunk> chunks = {}) {
    auto r = std::make_unique<Request>();
    r->id = RequestId(id);
    r->tokens = std::move(tokens);
    r->num_prompt_tokens = static_cast<int32_t>(r->tokens.size());
    r->max_tokens = 100;  // alive until finish()
    r->cache_salt = salt;
    r->kv_chunks = std::move(chunks);
    r->kv_chunk_prefix = {1};
    r->kv_blend_recompute = 0;
    sched_.add_request(std::move(r));
  }
  // Steps until request `id` has sampled once; returns the kv ops seen.
  KvOps prefill(int64_t id) {
    KvOps ops;
    for (int step = 0; step < 100; ++step) {
      SchedulerOutput out = sched_.schedule();
      ops.insert(ops.end(), out.kv_ops.begin(), out.kv_ops.end());
      runner_.execute(out);
      std::vector<int32_t> sampled;
      bool done = false;
      for (const ScheduledSeq& s : out.seqs) {
        if (!s.sample) continue;
        sampled.push_back(3);
        if (s.id == RequestId(id)) done = true;
      }
      sched_.update(out, sampled, runner_.kv_stats());
      if (done) return ops;
    }
    ADD_FAILURE() << "request " << id << " never sampled";
    return ops;
  }
  void finish(int64_t id) { sched_.finish(RequestId(id), FinishReason::kAborted); }

  // Layer l's stored K (value = false) or V of request `id` at `position`, every head.
  std::vector<float> stored(int64_t id, int32_t layer, int32_t position, bool value) const {
    const KvCacheView& kv = runner_.storage().view();
    const BlockTable& t = sched_.kv().table(RequestId(id), 0);
    const int64_t slot = static_cast<int64_t>(t[static_cast<size_t>(position / kBlock)].value()) * kBlock + position % kBlock;
    const int32_t hd = kv.layout.head_dim;
    std::vector<float> out(static_cast<size_t>(kv.layout.num_kv_heads * hd));
    for (int32_t h = 0; h < kv.layout.num_kv_heads; ++h) {
      float* dst = out.data() + static_cast<size_t>(h * hd);
      if (value) kv_read_value(kv.layout, kv.layers[layer], slot, h, dst);
      else kv_read_key(kv.layout, kv.layers[layer], slot, h, dst);
    }
    return out;
  }
  const Request* find(int64_t id) const { return sched_.find(RequestId(id)); }

 private:
  static KvCacheConfig cache_config() {
    KvCacheConfig c;
    c.num_blocks = 128;
    c.block_size = kBlock;
    return c;
  }
  Scheduler sched_;
  ModelRunner runner_;
};

std::vector<int32_t> random_tokens(std::mt19937& rng, int n) {
  std::vector<int32_t> t;
  while (static_cast<int>(t.size()) < n) t.push_back(3 + static_cast<int32_t>(rng() % 500));
  return t;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, static_cast<double>(std::fabs(a[i] - b[i])));
  return d;
}

TEST(KvChunksRunner, ChunkCopiedToEveryOffsetHasItsKeysReRotated) {
  auto model = Model::load(test::shared_path("models/synth-tiny-F32.gguf"));
  ChunkRunner run(*model);
  std::mt19937 rng(7);
  const std::vector<int32_t> doc = random_tokens(rng, 40);  // chunk prompt BOS + doc: 2 full blocks, 31 doc tokens
  std::vector<int32_t> chunk_prompt = {1};
  chunk_prompt.insert(chunk_prompt.end(), doc.begin(), doc.begin() + 2 * kBlock - 1);
  run.add(1, chunk_prompt, kv_chunk_extra_key(0));
  run.prefill(1);
  run.finish(1);  // its blocks stay cached under the chunk key

  int64_t id = 10;
  for (int32_t filler : {0, 1, 5, 15, 16, 17, 2 * kBlock + 3}) {
    SCOPED_TRACE("chunk after " + std::to_string(filler) + " filler tokens");
    std::vector<int32_t> prompt = {1};
    const std::vector<int32_t> fill = random_tokens(rng, filler);
    prompt.insert(prompt.end(), fill.begin(), fill.end());
    const auto begin = static_cast<int32_t>(prompt.size());
    prompt.insert(prompt.end(), doc.begin(), doc.end());
    const std::vector<int32_t> tail = random_tokens(rng, 5);
    prompt.insert(prompt.end(), tail.begin(), tail.end());
    const int64_t blend = id++, plain = id++;
    run.add(blend, prompt, 0, {{begin, begin + static_cast<int32_t>(doc.size())}});
    const KvOps ops = run.prefill(blend);
    run.add(plain, prompt, cache_salt_key("plain " + std::to_string(filler)));
    run.prefill(plain);
    ASSERT_NE(run.find(blend), nullptr);
    ASSERT_EQ(run.find(blend)->num_chunk_reused_tokens, 2 * kBlock - 1);
    ASSERT_EQ(run.find(blend)->num_chunk_recomputed_tokens, 0);
    int32_t num_moves = 0, num_rotations = 0;
    for (const KvOp& op : ops) {
      num_moves += op.kind == KvOp::Kind::kMoveSlot;
      num_rotations += op.kind == KvOp::Kind::kRotateKey && op.delta == filler;
    }
    EXPECT_EQ(num_moves, 2 * kBlock - 1);
    EXPECT_EQ(num_rotations, filler == 0 ? 0 : 2 * kBlock - 1);
    double deep_difference = 0;
    for (int32_t pos = begin; pos < begin + 2 * kBlock - 1; ++pos) {
      // Values carry no position: the copy is the same bytes. Keys were
      // rotated in f32 by the difference, not by the position: close.
      EXPECT_EQ(run.stored(blend, 0, pos, true), run.stored(plain, 0, pos, true)) << "position " << pos;
      EXPECT_LT(max_abs_diff(run.stored(blend, 0, pos, false), run.stored(plain, 0, pos, false)), 1e-4)
          << "position " << pos;
      deep_difference += max_abs_diff(run.stored(blend, 1, pos, true), run.stored(plain, 1, pos, true));
    }
    // Deeper layers hold the standalone KV: equal only where the chunk was computed.
    if (filler == 0) EXPECT_EQ(deep_difference, 0);
    else EXPECT_GT(deep_difference, 0);
    run.finish(blend);
    run.finish(plain);
  }
}

}  // namespace
}  // namespace kvlm
