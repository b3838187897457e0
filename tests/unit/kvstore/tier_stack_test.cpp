// The tier stack and its I/O thread: writes behind through a bounded queue
// (duplicates and overflow dropped and counted, flush at shutdown), lookups
// answered asynchronously with the validated contiguous prefix (wrong tokens,
// parent or size refused), polling that never blocks, and a Redis hit written
// back to disk.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <thread>

#include <gtest/gtest.h>

#include "kvstore/tier_stack.h"
#include "kvstore_test_util.h"
#include "redis_server.h"

namespace kvlm {
namespace {

using namespace std::chrono_literals;
const Hash128 kTierNs{0x4242, 0x4343};

// Waits (polling, as the engine does each step) for one lookup's result.
TierLookupResult wait_result(TierStack& s, std::chrono::milliseconds timeout = 5000ms) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    auto done = s.poll_completions();
    if (!done.empty()) {
      EXPECT_EQ(done.size(), 1u);
      return std::move(done[0]);
    }
    std::this_thread::sleep_for(1ms);
  }
  ADD_FAILURE() << "no lookup result";
  return {};
}

std::vector<int32_t> tokens_of(const std::vector<KvRecord>& chain) {
  std::vector<int32_t> out;
  for (const auto& r : chain) out.insert(out.end(), r.tokens.begin(), r.tokens.end());
  return out;
}

void enqueue_all(TierStack& s, const std::vector<KvRecord>& chain) {
  for (const auto& r : chain) ASSERT_TRUE(s.enqueue_store(r.hash, r.parent, r.tokens, r.payload));
}

TierStackConfig disk_config(const std::string& dir) {
  TierStackConfig c;
  c.disk = DiskStoreConfig{dir, 0, kTierNs};
  c.payload_bytes = 512;
  return c;
}

TEST(TierStack, WritesBehindThenLookupReturnsTheChain) {
  const std::string dir = test::fresh_dir("stack");
  auto s = TierStack::open(disk_config(dir));
  auto chain = test::make_chain(8, 1);
  enqueue_all(*s, chain);
  ASSERT_TRUE(s->flush(5.0));
  auto hashes = test::hashes_of(chain);
  // The blocks after a RAM hit of 2: parent = block 1's hash.
  const std::vector<int32_t> tokens = tokens_of(chain);
  s->begin_lookup(RequestId(7), hashes[1], std::span(hashes).subspan(2), std::span(tokens).subspan(2 * 16));
  TierLookupResult r = wait_result(*s);
  EXPECT_EQ(r.request, RequestId(7));
  ASSERT_EQ(r.records.size(), 6u);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(r.records[i].payload, chain[i + 2].payload);
  EXPECT_EQ(r.num_from_tier[0], 6);
  EXPECT_GT(r.latency_s, 0);
  TierStackStats st = s->stats();
  EXPECT_EQ(st.num_hit_blocks, 6);
  EXPECT_EQ(st.tiers[0].num_blocks_written, 8);
  // A restart finds them.
  s.reset();
  auto again = TierStack::open(disk_config(dir));
  again->begin_lookup(RequestId(8), std::nullopt, hashes, tokens_of(chain));
  EXPECT_EQ(wait_result(*again).records.size(), 8u);
}

TEST(TierStack, WrongTokensParentOrSizeAreRefused) {
  auto s = TierStack::open(disk_config(test::fresh_dir("stack")));
  auto chain = test::make_chain(4, 2);
  enqueue_all(*s, chain);
  ASSERT_TRUE(s->flush(5.0));
  auto hashes = test::hashes_of(chain);
  auto tokens = tokens_of(chain);
  tokens[2 * 16 + 5] += 1;  // block 2 claims other tokens under the same hash
  s->begin_lookup(RequestId(1), std::nullopt, hashes, tokens);
  EXPECT_EQ(wait_result(*s).records.size(), 2u);
  s->begin_lookup(RequestId(2), hashes[0], hashes, tokens_of(chain));  // wrong parent for block 0
  EXPECT_EQ(wait_result(*s).records.size(), 0u);
  EXPECT_EQ(s->stats().num_rejected, 2);

  TierStackConfig c = disk_config(test::fresh_dir("stack"));
  c.payload_bytes = 1024;  // another layout wrote 512-byte blocks
  auto other = TierStack::open(c);
  enqueue_all(*other, chain);
  ASSERT_TRUE(other->flush(5.0));
  other->begin_lookup(RequestId(3), std::nullopt, hashes, tokens_of(chain));
  EXPECT_EQ(wait_result(*other).records.size(), 0u);
}

// A tier whose store() blocks until released, and whose load() is slow.
class GatedStore final : public KvStore {
 public:
  std::string_view name() const override { return "gated"; }
  size_t probe(std::span<const BlockHash>) override { return 0; }
  std::vector<KvRecord> load(std::span<const BlockHash>, const Deadline&) override {
    std::this_thread::sleep_for(300ms);
    return {};
  }
  size_t store(std::span<const KvRecord> records) override {
    std::unique_lock<std::mutex> lock(mu);
    ++num_calls;
    entered.notify_all();
    open_cv.wait(lock, [&] { return is_open; });
    num_stored += records.size();
    return records.size();
  }
  TierStats stats() const override { return {}; }
  std::mutex mu;
  std::condition_variable entered, open_cv;
  bool is_open = false;
  int num_calls = 0;
  size_t num_stored = 0;
};

TEST(TierStack, BoundedQueueDropsDuplicatesAndOverflowAndFlushWaits) {
  auto gated = std::make_unique<GatedStore>();
  GatedStore& g = *gated;
  std::vector<std::unique_ptr<KvStore>> tiers;
  tiers.push_back(std::move(gated));
  TierStackConfig c;
  c.max_queued_writes = 4;
  c.max_write_batch = 1;
  TierStack s(std::move(tiers), c);
  auto chain = test::make_chain(7, 3);
  ASSERT_TRUE(s.enqueue_store(chain[0].hash, chain[0].parent, chain[0].tokens, chain[0].payload));
  {
    std::unique_lock<std::mutex> lock(g.mu);
    g.entered.wait(lock, [&] { return g.num_calls == 1; });  // the I/O thread is stuck in block 0
  }
  for (int i = 1; i <= 4; ++i) EXPECT_TRUE(s.enqueue_store(chain[i].hash, chain[i].parent, chain[i].tokens, chain[i].payload));
  EXPECT_FALSE(s.enqueue_store(chain[5].hash, chain[5].parent, chain[5].tokens, chain[5].payload));  // full
  EXPECT_FALSE(s.enqueue_store(chain[2].hash, chain[2].parent, chain[2].tokens, chain[2].payload));  // queued already
  EXPECT_FALSE(s.enqueue_store(chain[0].hash, chain[0].parent, chain[0].tokens, chain[0].payload));  // being written
  TierStackStats st = s.stats();
  EXPECT_EQ(st.num_queued_writes, 4);
  EXPECT_EQ(st.num_dropped_full, 1);
  EXPECT_EQ(st.num_dropped_duplicate, 2);
  // A stuck tier: flush gives up at its timeout.
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(s.flush(0.2));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 190ms);
  {
    std::lock_guard<std::mutex> lock(g.mu);
    g.is_open = true;
  }
  g.open_cv.notify_all();
  EXPECT_TRUE(s.flush(5.0));
  EXPECT_EQ(g.num_stored, 5u);
}

TEST(TierStack, PollingNeverWaitsForTheTier) {
  std::vector<std::unique_ptr<KvStore>> tiers;
  tiers.push_back(std::make_unique<GatedStore>());
  TierStack s(std::move(tiers), TierStackConfig{});
  auto chain = test::make_chain(2, 4);
  s.begin_lookup(RequestId(1), std::nullopt, test::hashes_of(chain), tokens_of(chain));
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(s.poll_completions().empty());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 100ms);  // the load takes 300 ms
  EXPECT_TRUE(wait_result(s).records.empty());
}

TEST(TierStack, InterleavedWritesAndLookupsOnlyEverReturnTheRightPrefix) {
  // The engine thread's pattern: enqueue writes, begin lookups and poll, all
  // at once, while the I/O thread works (a TSan workload too).
  auto s = TierStack::open(disk_config(test::fresh_dir("stack")));
  std::vector<std::vector<KvRecord>> chains;
  for (int c = 0; c < 60; ++c) chains.push_back(test::make_chain(4, 100 + c));
  size_t num_results = 0, num_hit_blocks = 0;
  auto check = [&](const std::vector<TierLookupResult>& results) {
    for (const auto& r : results) {
      const auto& chain = chains[static_cast<size_t>(r.request.value())];
      ASSERT_LE(r.records.size(), chain.size());
      for (size_t i = 0; i < r.records.size(); ++i) EXPECT_EQ(r.records[i].payload, chain[i].payload);
      ++num_results;
      num_hit_blocks += r.records.size();
    }
  };
  for (size_t c = 0; c < chains.size(); ++c) {
    enqueue_all(*s, chains[c]);
    const size_t probe = c / 2;  // an older chain: written, or still queued
    s->begin_lookup(RequestId(static_cast<int64_t>(probe)), std::nullopt, test::hashes_of(chains[probe]),
                    tokens_of(chains[probe]));
    check(s->poll_completions());
  }
  // Lookups go before writes on the I/O thread, so these mostly miss; what
  // they return must still be right.
  ASSERT_TRUE(s->flush(10.0));
  auto drain = [&](size_t num_expected) {
    for (int i = 0; i < 5000 && num_results < num_expected; ++i) {
      check(s->poll_completions());
      std::this_thread::sleep_for(1ms);
    }
    EXPECT_EQ(num_results, num_expected);
  };
  drain(chains.size());
  // Everything is written now: every chain is a whole hit.
  num_hit_blocks = 0;
  for (size_t c = 0; c < chains.size(); ++c)
    s->begin_lookup(RequestId(static_cast<int64_t>(c)), std::nullopt, test::hashes_of(chains[c]),
                    tokens_of(chains[c]));
  drain(2 * chains.size());
  EXPECT_EQ(num_hit_blocks, 4 * chains.size());
  EXPECT_EQ(s->stats().num_rejected, 0);
}

TierSecurity test_secret() { return TierSecurity{derive_tier_keys("the stack tests' tier secret"), false}; }

RedisStoreConfig redis_config(const std::string& url, TierSecurity security = {}) {
  RedisStoreConfig r;
  r.url = url;
  r.ttl_s = 600;
  r.ns = kTierNs;
  r.security = std::move(security);
  return r;
}

TEST(TierStack, AuthenticatedRedisHitIsWrittenBackToDisk) {
  test::RedisServer server;
  ASSERT_TRUE(server.running());
  TierStackConfig c = disk_config(test::fresh_dir("stack"));
  c.disk->security = test_secret();
  c.redis = redis_config(server.url(), test_secret());
  auto chain = test::make_chain(6, 5);
  auto hashes = test::hashes_of(chain);
  {
    auto first = TierStack::open(c);
    enqueue_all(*first, chain);
    ASSERT_TRUE(first->flush(5.0));
    EXPECT_EQ(first->stats().tiers[1].num_blocks_written, 6);
  }
  // A second process with its own (empty) disk shares the Redis tier.
  c.disk->dir = test::fresh_dir("stack");
  auto second = TierStack::open(c);
  second->begin_lookup(RequestId(1), std::nullopt, hashes, tokens_of(chain));
  TierLookupResult r = wait_result(*second);
  EXPECT_EQ(r.records.size(), 6u);
  EXPECT_EQ(r.num_from_tier[0], 0);
  EXPECT_EQ(r.num_from_tier[1], 6);
  auto& disk = static_cast<DiskStore&>(second->tier(0));
  for (int i = 0; i < 500 && !disk.contains(hashes[5]); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(disk.probe(hashes), 6u);
  // Redis down: the disk still answers; nothing throws.
  server.kill();
  second->begin_lookup(RequestId(2), std::nullopt, hashes, tokens_of(chain));
  EXPECT_EQ(wait_result(*second).num_from_tier[0], 6);
}

TEST(TierStack, UnauthenticatedRedisHitIsUsedButNotWrittenToDisk) {
  test::RedisServer server;
  ASSERT_TRUE(server.running());
  TierStackConfig c = disk_config(test::fresh_dir("stack"));
  c.redis = redis_config(server.url());
  auto chain = test::make_chain(4, 9);
  {
    auto first = TierStack::open(c);
    enqueue_all(*first, chain);
    ASSERT_TRUE(first->flush(5.0));
  }
  c.disk->dir = test::fresh_dir("stack");
  auto second = TierStack::open(c);
  second->begin_lookup(RequestId(1), std::nullopt, test::hashes_of(chain), tokens_of(chain));
  EXPECT_EQ(wait_result(*second).num_from_tier[1], 4);
  // The I/O thread writes back before it serves the next lookup.
  auto other = test::make_chain(1, 10);
  second->begin_lookup(RequestId(2), std::nullopt, test::hashes_of(other), tokens_of(other));
  wait_result(*second);
  EXPECT_EQ(static_cast<DiskStore&>(second->tier(0)).probe(test::hashes_of(chain)), 0u);
}

TEST(TierStack, AuthenticatedRecordsOfAnotherSaltAreRefused) {
  TierStackConfig c = disk_config(test::fresh_dir("stack"));
  c.disk->security = test_secret();
  auto s = TierStack::open(c);
  auto chain = test::make_chain(3, 11);
  for (const auto& r : chain) ASSERT_TRUE(s->enqueue_store(r.hash, r.parent, r.tokens, r.payload, /*salt=*/0x51));
  ASSERT_TRUE(s->flush(5.0));
  s->begin_lookup(RequestId(1), std::nullopt, test::hashes_of(chain), tokens_of(chain), /*salt=*/0x73);
  EXPECT_TRUE(wait_result(*s).records.empty());
  EXPECT_EQ(s->stats().num_rejected, 1);
  EXPECT_EQ(s->stats().tiers[0].num_refused[static_cast<size_t>(TierRefusal::kForeign)], 1);
  s->begin_lookup(RequestId(2), std::nullopt, test::hashes_of(chain), tokens_of(chain), /*salt=*/0x51);
  EXPECT_EQ(wait_result(*s).records.size(), 3u);
}

}  // namespace
}  // namespace kvlm
