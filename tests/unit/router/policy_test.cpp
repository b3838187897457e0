// Routing policies over workers whose state the test sets: kv-aware weighs
// cached blocks (RAM and shared tier) against backlog; least-load and
// round-robin; session sticks; down, draining, open-circuit and excluded
// workers never take a request.
#include <gtest/gtest.h>

#include "router/policy.h"

namespace kvlm::router {
namespace {

struct Fixture {
  Fixture() : set(HealthConfig{}) {
    for (int i = 0; i < 3; ++i) workers.push_back(set.add("http://127.0.0.1:" + std::to_string(9000 + i)));
    for (auto& w : workers) {
      w->block_size = 4;
      w->kv.reset({}, 0);
    }
    for (int i = 0; i < 41; ++i) prompt.tokens.push_back(100 + i);  // 10 full blocks (and one token)
  }
  std::optional<Decision> pick(Policy p, const std::set<std::string>& exclude = {}) {
    std::lock_guard lock(set.mu());
    return choose(p, weights, prompt, set.all_locked(), exclude, set, rr);
  }
  WorkerSet set;
  std::vector<std::shared_ptr<Worker>> workers;
  PromptInfo prompt;
  PolicyWeights weights;
  uint64_t rr = 0;
};

TEST(RouterPolicy, KvAwarePicksTheWorkerHoldingThePrefixUnlessItIsBusy) {
  Fixture f;
  const auto& c = f.prompt.chain(4);
  ASSERT_EQ(c.size(), 10u);
  f.workers[1]->kv.reset(std::vector<BlockHash>(c.begin(), c.begin() + 6), 1);
  auto d = f.pick(Policy::kKvAware);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->worker, f.workers[1]);
  EXPECT_EQ(d->predicted_cached, 24);
  EXPECT_EQ(d->predicted_uncached, 41 - 24);
  EXPECT_STREQ(d->reason, "prefix");
  // 24 cached tokens are not worth waiting behind 100 tokens of backlog.
  f.workers[1]->load.num_pending_tokens = 100;
  d = f.pick(Policy::kKvAware);
  EXPECT_NE(d->worker, f.workers[1]);
  EXPECT_EQ(d->predicted_cached, 0);
  // The shared tier's blocks count for every worker of its namespace, at tier_cost.
  f.workers[2]->shared_tier = "ns";
  f.set.shared_tier().add("ns", c, std::chrono::seconds(60), Clock::now());
  d = f.pick(Policy::kKvAware);
  EXPECT_EQ(d->worker, f.workers[2]);
  EXPECT_EQ(d->predicted_cached, 40) << "all ten full blocks: from the tier";
}

TEST(RouterPolicy, LeastLoadAndRoundRobinAndSession) {
  Fixture f;
  f.workers[0]->load.num_pending_tokens = 50;
  f.workers[1]->num_outstanding_tokens = 10;
  EXPECT_EQ(f.pick(Policy::kLeastLoad)->worker, f.workers[2]);
  std::set<std::shared_ptr<Worker>> seen;
  for (int i = 0; i < 3; ++i) seen.insert(f.pick(Policy::kRoundRobin)->worker);
  EXPECT_EQ(seen.size(), 3u);
  f.prompt.session = "user-42";
  const auto home = f.pick(Policy::kSession)->worker;
  for (int i = 0; i < 5; ++i) EXPECT_EQ(f.pick(Policy::kSession)->worker, home);
  // Another worker leaving does not move the session (rendezvous hashing);
  // its own worker leaving does.
  for (auto& w : f.workers)
    if (w != home) {
      w->state = WorkerState::kDown;
      break;
    }
  EXPECT_EQ(f.pick(Policy::kSession)->worker, home);
  home->state = WorkerState::kDown;
  const auto moved = f.pick(Policy::kSession);
  ASSERT_TRUE(moved);
  EXPECT_NE(moved->worker, home);
}

TEST(RouterPolicy, OnlyRoutableWorkersTakeRequests) {
  Fixture f;
  f.workers[0]->state = WorkerState::kDown;
  f.workers[1]->state = WorkerState::kDraining;
  for (int i = 0; i < 4; ++i) EXPECT_EQ(f.pick(Policy::kRoundRobin)->worker, f.workers[2]);
  EXPECT_FALSE(f.pick(Policy::kKvAware, {f.workers[2]->url()}));
  f.workers[2]->open_until = Clock::now() + std::chrono::seconds(10);
  EXPECT_FALSE(f.pick(Policy::kLeastLoad));
  f.workers[0]->state = WorkerState::kUp;
  f.workers[0]->member = false;
  EXPECT_FALSE(f.pick(Policy::kLeastLoad)) << "a worker membership dropped";
}

TEST(RouterPolicy, ParsesItsNames) {
  EXPECT_EQ(parse_policy("kv-aware"), Policy::kKvAware);
  EXPECT_EQ(parse_policy("session"), Policy::kSession);
  EXPECT_FALSE(parse_policy("random"));
  EXPECT_STREQ(policy_name(Policy::kLeastLoad), "least-load");
}

}  // namespace
}  // namespace kvlm::router
