// The server's cache of compiled grammars (grammar_cache.h): one budget for
// compilations, the cache and grammars running requests hold; bounded
// compilations at once; refusals cached and counted.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>

#include <fmt/format.h>

#include "constrain/constraint.h"
#include "constrain/grammar_cache.h"
#include "unit/constrain/constrain_test_helpers.h"

namespace kvlm::constrain {
namespace {

using test_helpers::matches;
using test_helpers::any_of_objects;
using test_helpers::kMiB;
using test_helpers::limit_thrown;

GrammarLimits small_limits(int64_t bytes, int compilations = 2, int wait_ms = 2000, int64_t cached_bytes = 0) {
  return {.memory_bytes = bytes, .max_grammar_bytes = 0, .max_cached_bytes = cached_bytes,
          .max_compilations = compilations, .max_wait = std::chrono::milliseconds(wait_ms)};
}

TEST(GrammarCache, ARepeatedSchemaCompilesOnce) {
  GrammarCache cache(small_limits(64 * kMiB));
  std::atomic<int> builds{0};
  auto build = [&] {
    ++builds;
    return json_schema_program(any_of_objects(500));
  };
  auto a = cache.get("k", build);
  auto b = cache.get("k", build);
  EXPECT_EQ(a.get(), b.get());
  EXPECT_EQ(builds.load(), 1);
  const GrammarStats s = cache.stats();
  EXPECT_EQ(s.num_compiled, 1);
  EXPECT_EQ(s.num_hits, 1);
  EXPECT_EQ(s.num_cached, 1);
  EXPECT_GE(s.num_bytes_in_use, a->num_bytes());
  EXPECT_LT(s.num_bytes_in_use, a->num_bytes() + 4096);
}

TEST(GrammarCache, HeldGrammarsStayCountedUntilTheirLastHolderGoes) {
  std::shared_ptr<const Program> held;
  std::shared_ptr<GrammarCache> cache = std::make_shared<GrammarCache>(small_limits(64 * kMiB));
  held = cache->get("", [] { return json_schema_program(any_of_objects(500)); });  // not cached
  EXPECT_GE(cache->stats().num_bytes_in_use, held->num_bytes());
  auto other = cache->get("", [] { return json_schema_program(any_of_objects(10)); });
  other.reset();
  EXPECT_GE(cache->stats().num_bytes_in_use, held->num_bytes());
  EXPECT_LT(cache->stats().num_bytes_in_use, held->num_bytes() + 4096);
  cache.reset();  // a request may outlive the server's cache: its grammar still gives back
  EXPECT_TRUE(matches(held, R"({"f3":1})"));
  held.reset();
}

TEST(GrammarCache, RefusalsAreCachedAndCounted) {
  GrammarCache cache(small_limits(16 * kMiB));  // a grammar may use 4 MiB
  std::atomic<int> builds{0};
  auto huge = [&] {
    ++builds;
    return json_schema_program(any_of_objects(20000));
  };
  EXPECT_EQ(limit_thrown([&] { cache.get("huge", huge); }), GrammarLimit::kTooLarge);
  EXPECT_EQ(limit_thrown([&] { cache.get("huge", huge); }), GrammarLimit::kTooLarge);
  EXPECT_EQ(builds.load(), 1);
  auto bad = [] { return json_schema_program(Json::parse(R"({"type":"nope"})")); };
  EXPECT_THROW(cache.get("bad", bad), Error);
  EXPECT_THROW(cache.get("bad", bad), Error);
  const GrammarStats s = cache.stats();
  EXPECT_EQ(s.num_refused[static_cast<int>(GrammarLimit::kTooLarge)], 2);
  EXPECT_EQ(s.num_hits, 2);
  EXPECT_EQ(s.num_compiled, 0);
  EXPECT_LT(s.num_bytes_in_use, 4096);  // the two refusals' keys
}

TEST(GrammarCache, NoSlotWithinTheWaitIsBusy) {
  GrammarCache cache(small_limits(64 * kMiB, /*compilations=*/1, /*wait_ms=*/50));
  std::promise<void> started, release;
  std::shared_future<void> released = release.get_future().share();
  std::thread slow([&] {
    cache.get("", [&] {
      started.set_value();
      released.wait();
      return json_object_program();
    });
  });
  started.get_future().wait();
  EXPECT_EQ(cache.stats().num_compiling, 1);
  EXPECT_EQ(limit_thrown([&] { cache.get("other", [] { return json_object_program(); }); }), GrammarLimit::kBusy);
  release.set_value();
  slow.join();
  EXPECT_NO_THROW(cache.get("other", [] { return json_object_program(); }));
  EXPECT_EQ(cache.stats().num_refused[static_cast<int>(GrammarLimit::kBusy)], 1);
}

TEST(GrammarCache, ConcurrentRequestsForOneGrammarShareOneCompilation) {
  GrammarCache cache(small_limits(64 * kMiB, /*compilations=*/4));
  std::atomic<int> builds{0};
  std::vector<std::thread> threads;
  std::vector<std::shared_ptr<const Program>> got(8);
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&, i] {
      got[i] = cache.get("same", [&] {
        ++builds;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        return json_schema_program(any_of_objects(200));
      });
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(builds.load(), 1);
  for (const auto& p : got) EXPECT_EQ(p.get(), got[0].get());
}

TEST(GrammarCache, ShortMemoryDropsUnusedCachedGrammarsFirst) {
  // The cache may keep the whole budget here: compilations make the room.
  GrammarCache cache(small_limits(8 * kMiB, 2, 2000, 8 * kMiB));
  // Fill the cache with grammars nobody holds, then ask for more.
  for (int i = 0; i < 40; ++i)
    cache.get(fmt::format("k{}", i), [i] { return json_schema_program(any_of_objects(400, fmt::format("s{}_", i))); });
  EXPECT_LE(cache.stats().num_bytes_in_use, 8 * kMiB);
  EXPECT_LT(cache.stats().num_cached, 40);  // the oldest went to make room
  // Held grammars cannot be dropped: past them a compilation is refused.
  std::vector<std::shared_ptr<const Program>> held;
  GrammarLimit refused = GrammarLimit::kBusy;
  for (int i = 0; i < 400 && refused != GrammarLimit::kMemory; ++i) {
    try {
      held.push_back(cache.get("", [i] { return json_schema_program(any_of_objects(400, fmt::format("h{}_", i))); }));
    } catch (const GrammarLimitError& e) {
      refused = e.limit();
    }
  }
  EXPECT_EQ(refused, GrammarLimit::kMemory);
  EXPECT_LE(cache.stats().num_bytes_in_use, 8 * kMiB);
  held.clear();
  EXPECT_LT(cache.stats().num_bytes_in_use, kMiB);
}

TEST(GrammarCache, CachedGrammarsKeepWithinTheirShareLeastRecentlyUsedFirst) {
  const int64_t one = json_schema_program(any_of_objects(400, "x"))->num_bytes();
  GrammarCache cache(small_limits(64 * kMiB, 2, 2000, 3 * one + one / 2));
  std::atomic<int> builds{0};
  auto grammar = [&](int i) {
    return cache.get(fmt::format("k{}", i), [&, i] {
      ++builds;
      return json_schema_program(any_of_objects(400, fmt::format("s{}_", i)));
    });
  };
  for (int i = 0; i < 3; ++i) grammar(i);
  grammar(0);  // k0 used last: k1 is the least recently used
  grammar(3);
  EXPECT_EQ(cache.stats().num_cached, 3);
  EXPECT_EQ(builds.load(), 4);
  grammar(0);
  grammar(2);
  grammar(3);
  EXPECT_EQ(builds.load(), 4) << "k0, k2 and k3 were kept";
  grammar(1);
  EXPECT_EQ(builds.load(), 5) << "k1 was dropped";
  EXPECT_LT(cache.stats().num_bytes_in_use, 4 * one);
  // A grammar larger than the cache's share is not kept, only handed out.
  GrammarCache small(small_limits(64 * kMiB, 2, 2000, one / 2));
  auto held = small.get("big", [] { return json_schema_program(any_of_objects(400, "x")); });
  EXPECT_EQ(small.stats().num_cached, 0);
  EXPECT_GE(small.stats().num_bytes_in_use, held->num_bytes());
  held.reset();
  EXPECT_LT(small.stats().num_bytes_in_use, 4096);
}

}  // namespace
}  // namespace kvlm::constrain
