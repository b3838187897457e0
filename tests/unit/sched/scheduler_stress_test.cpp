// Randomized stress: many requests with random prompts (sharing prefixes),
// outputs, stop tokens and cancellations through a tiny pool, checking the
// scheduler's and the KV cache's invariants after every schedule() and
// update(), and that the pool is whole at the end.
//
// Besides counting references, the test simulates KV content: every slot a
// step computes gets its token id written into the block the table maps it
// to, and every slot a request reads back must still hold its own token. A
// wrong prefix hit, a block evicted while in use, or a write into a shared
// block shows up as a mismatch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "sched/scheduler.h"

namespace kvlm {
namespace {

struct StressCase {
  std::string name;
  SchedulerConfig sched;
  KvCacheConfig kv;
  int32_t num_requests = 150;
};

class SchedulerStress : public ::testing::TestWithParam<StressCase> {};

int32_t ceil_div(int32_t a, int32_t b) { return (a + b - 1) / b; }

class Checker {
 public:
  Checker(const StressCase& c, uint32_t seed)
      : c_(c), sched_(c.sched, c.kv), rng_(seed),
        content_(static_cast<size_t>(c.kv.num_blocks),
                 std::vector<int32_t>(static_cast<size_t>(c.kv.block_size), -1)) {
    for (auto& t : templates_) {
      t.resize(64);
      for (int32_t& x : t) x = pick(0, 3);  // tiny vocab: blocks repeat
    }
  }

  void run() {
    int32_t num_added = 0;
    int32_t num_steps = 0;
    while (num_added < c_.num_requests || sched_.has_unfinished()) {
      ASSERT_LT(++num_steps, 20000) << "no progress";
      int32_t arrivals = num_added < c_.num_requests ? pick(0, 2) : 0;
      for (int32_t i = 0; i < arrivals && num_added < c_.num_requests; ++i, ++num_added) {
        add(num_added);
      }
      if (pick(0, 99) < 2) cancel_random();
      step();
      if (::testing::Test::HasFatalFailure()) return;
    }
    // The last finished requests' tables reach the runner with the next
    // output: then its copy holds none.
    const SchedulerOutput last = sched_.schedule();
    EXPECT_TRUE(last.seqs.empty());
    for (RequestId id : last.released_tables) mirror_.forget(id);
    EXPECT_EQ(mirror_.num_requests(), 0u);
    EXPECT_EQ(sched_.kv().pool().num_free_blocks(), c_.kv.num_blocks);
    EXPECT_EQ(num_finished_ + num_rejected_, c_.num_requests);
    EXPECT_EQ(sched_.num_running(), 0);
    EXPECT_EQ(sched_.num_waiting(), 0);
    stats.num_preemptions = sched_.num_preemptions();
    stats.num_hit_tokens = sched_.kv().num_prefix_hit_tokens();
    stats.num_rejected = num_rejected_;
  }

  // What a run exercised, so the test can insist it was not vacuous.
  struct Stats {
    int64_t num_preemptions = 0;
    int64_t num_hit_tokens = 0;
    int32_t num_rejected = 0;
    int32_t num_stopped = 0;
    int32_t num_released_blocks = 0;  // window-group releases seen in outputs
  } stats;

 private:
  int32_t pick(int32_t lo, int32_t hi) {
    return std::uniform_int_distribution<int32_t>(lo, hi)(rng_);
  }

  void add(int64_t id) {
    auto r = std::make_unique<Request>();
    r->id = RequestId(id);
    int32_t len = pick(1, c_.sched.max_model_len + 4);
    if (pick(0, 9) < 6) {  // share a prefix with a template
      const auto& t = templates_[static_cast<size_t>(pick(0, 2))];
      int32_t shared = std::min<int32_t>(len, pick(0, static_cast<int32_t>(t.size())));
      r->tokens.assign(t.begin(), t.begin() + shared);
    }
    while (r->num_tokens() < len) r->tokens.push_back(pick(0, 3));
    r->max_tokens = pick(1, 24);
    if (pick(0, 9) < 3) r->stop_token_ids = {pick(0, 7)};
    r->cache_salt = pick(0, 9) == 0 ? 1 : 0;
    const int32_t num_groups = static_cast<int32_t>(c_.kv.group_windows.size());
    bool fits = len <= c_.sched.max_model_len - 1 &&
                num_groups * ceil_div(len + 1, c_.kv.block_size) <= c_.kv.num_blocks;
    int32_t max_tokens = std::min(r->max_tokens, c_.sched.max_model_len - len);
    try {
      sched_.add_request(std::move(r));
      ASSERT_TRUE(fits) << "accepted a prompt of " << len << " tokens";
      EXPECT_EQ(sched_.find(RequestId(id))->max_tokens, max_tokens);
      live_.insert(id);
    } catch (const Error& e) {
      ASSERT_FALSE(fits) << "rejected a prompt of " << len << " tokens: " << e.what();
      EXPECT_EQ(e.code(), ErrorCode::kOutOfRange);
      ++num_rejected_;
    }
  }

  void cancel_random() {
    if (live_.empty()) return;
    auto it = live_.begin();
    std::advance(it, pick(0, static_cast<int32_t>(live_.size()) - 1));
    int64_t id = *it;
    std::unique_ptr<Request> r = sched_.finish(RequestId(id), FinishReason::kAborted);
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->status, RequestStatus::kFinished);
    live_.erase(id);
    ++num_finished_;
  }

  void step() {
    SchedulerOutput out = sched_.schedule();
    check_schedule(out);
    if (::testing::Test::HasFatalFailure()) return;
    std::vector<int32_t> sampled;
    for (const ScheduledSeq& s : out.seqs) {
      if (s.sample) sampled.push_back(pick(0, 3));
    }
    if (!out.seqs.empty() && pick(0, 99) < 2) cancel_random();  // mid-step cancel
    for (auto& r : sched_.update(out, sampled)) check_finished(*r);
    check_refs();
    for (int64_t id : live_) {
      const Request* r = sched_.find(RequestId(id));
      ASSERT_NE(r, nullptr);
      if (r->status != RequestStatus::kRunning) continue;
      for (int32_t g = 0; g < sched_.kv().num_groups(); ++g) {
        const BlockTable& t = sched_.kv().table(r->id, g);
        ASSERT_GE(static_cast<int32_t>(t.size()) * c_.kv.block_size,
                  r->num_computed_tokens);
      }
    }
  }

  void check_schedule(const SchedulerOutput& out) {
    const KvCacheManager& kv = sched_.kv();
    const int32_t bs = c_.kv.block_size;
    int32_t num_tokens = 0;
    std::set<int64_t> seen;
    ASSERT_LE(static_cast<int32_t>(out.seqs.size()), c_.sched.max_num_seqs);
    ASSERT_LE(sched_.num_running(), c_.sched.max_num_seqs);
    for (RequestId id : out.released_tables) {
      ASSERT_FALSE(kv.has_request(id)) << "released tables of a request with blocks";
      mirror_.forget(id);
    }
    for (RequestId id : out.preempted) {
      const Request* r = sched_.find(id);
      ASSERT_NE(r, nullptr);
      EXPECT_EQ(r->status, RequestStatus::kWaiting);
      EXPECT_EQ(r->num_computed_tokens, 0);
      EXPECT_FALSE(kv.has_request(id));
    }
    for (const ScheduledSeq& s : out.seqs) {
      ASSERT_TRUE(seen.insert(s.id.value()).second) << "scheduled twice";
      const Request* r = sched_.find(s.id);
      ASSERT_NE(r, nullptr);
      ASSERT_EQ(r->status, RequestStatus::kRunning);
      const auto n = static_cast<int32_t>(s.new_tokens.size());
      ASSERT_GE(n, 1);
      ASSERT_EQ(s.num_computed, r->num_computed_tokens);
      ASSERT_LE(s.num_computed + n, r->num_tokens());
      ASSERT_TRUE(std::equal(s.new_tokens.begin(), s.new_tokens.end(),
                             r->tokens.begin() + s.num_computed));
      ASSERT_EQ(s.sample, s.num_computed + n == r->num_tokens());
      num_tokens += n;
      ASSERT_EQ(static_cast<int32_t>(s.table_changes.size()), kv.num_groups());
      // The runner's copy, built from this step's changes alone.
      const std::vector<BlockTableMirror::Table>& mirrored = mirror_.apply(s.id, s.table_changes);
      for (int32_t g = 0; g < kv.num_groups(); ++g) {
        const BlockTable& t = kv.table(s.id, g);
        const int32_t window = c_.kv.group_windows[g];
        const auto& table = mirrored[g].ids;
        ASSERT_EQ(table.size(), t.size());
        for (size_t i = static_cast<size_t>(t.num_released); i < t.size(); ++i)
          ASSERT_EQ(table[i], t[i].value()) << "the runner's copy differs at entry " << i;
        ASSERT_EQ(mirrored[g].num_released, t.num_released);
        ASSERT_GE(static_cast<int32_t>(table.size()) * bs, s.num_computed + n);
        if (window == 0) {
          ASSERT_EQ(t.num_released, 0);
        } else if (t.num_released > 0) {
          stats.num_released_blocks = std::max(stats.num_released_blocks, t.num_released);
          // Released slots are all out of sight of the first new query.
          ASSERT_LE(t.num_released * bs - 1, s.num_computed - window);
        }
        // Cached slots still hold this request's tokens.
        for (int32_t slot = t.num_released * bs; slot < s.num_computed; ++slot) {
          int32_t b = table[static_cast<size_t>(slot / bs)];
          ASSERT_EQ(content_[b][slot % bs], r->tokens[slot])
              << "request " << s.id.value() << " group " << g << " slot " << slot;
        }
        // New slots are written into blocks nobody else holds.
        for (int32_t slot = s.num_computed; slot < s.num_computed + n; ++slot) {
          int32_t b = table[static_cast<size_t>(slot / bs)];
          ASSERT_EQ(kv.pool().meta(BlockId(b)).ref_count, 1) << "write into a shared block";
          content_[b][slot % bs] = r->tokens[slot];
        }
      }
    }
    ASSERT_EQ(out.num_tokens, num_tokens);
    ASSERT_LE(out.num_tokens, c_.sched.max_num_batched_tokens);
    check_refs();
  }

  // Every reference is a live table entry of a running request; a block in
  // two tables is a prefix-cache block; the free queue holds exactly the rest.
  void check_refs() {
    const KvCacheManager& kv = sched_.kv();
    std::map<int32_t, int32_t> refs;
    for (int64_t id : live_) {
      const Request* r = sched_.find(RequestId(id));
      ASSERT_NE(r, nullptr);
      if (r->status != RequestStatus::kRunning) {
        ASSERT_FALSE(kv.has_request(r->id)) << "a waiting request holds blocks";
        continue;
      }
      std::set<int32_t> mine;
      for (int32_t g = 0; g < kv.num_groups(); ++g) {
        const BlockTable& t = kv.table(r->id, g);
        for (size_t i = static_cast<size_t>(t.num_released); i < t.size(); ++i) {
          ASSERT_TRUE(mine.insert(t[i].value()).second) << "block twice in one request";
          ++refs[t[i].value()];
        }
      }
    }
    int32_t num_zero = 0;
    for (int32_t b = 0; b < c_.kv.num_blocks; ++b) {
      const BlockMeta& m = kv.pool().meta(BlockId(b));
      int32_t expect = refs.count(b) ? refs[b] : 0;
      ASSERT_EQ(m.ref_count, expect) << "block " << b;
      ASSERT_EQ(m.in_free_queue, expect == 0) << "block " << b;
      if (expect >= 2) {
        ASSERT_TRUE(m.hash.has_value()) << "block " << b << " shared without the prefix cache";
      }
      if (m.hash) {
        ASSERT_EQ(kv.pool().find_cached(*m.hash), BlockId(b));
      }
      num_zero += expect == 0;
    }
    ASSERT_EQ(kv.pool().num_free_blocks(), num_zero);
    ASSERT_EQ(static_cast<int32_t>(kv.pool().free_queue_order().size()), num_zero);
  }

  void check_finished(const Request& r) {
    ASSERT_EQ(live_.erase(r.id.value()), 1u);
    ++num_finished_;
    EXPECT_EQ(r.status, RequestStatus::kFinished);
    ASSERT_TRUE(r.finish_reason.has_value());
    EXPECT_FALSE(sched_.kv().has_request(r.id));
    EXPECT_GE(r.num_output_tokens(), 1);
    EXPECT_LE(r.num_output_tokens(), r.max_tokens);
    EXPECT_LE(r.num_tokens(), c_.sched.max_model_len);
    const int32_t last = r.tokens.back();
    const auto& stops = r.stop_token_ids;
    bool stopped = std::find(stops.begin(), stops.end(), last) != stops.end();
    if (*r.finish_reason == FinishReason::kStop) {
      EXPECT_TRUE(stopped);
      ++stats.num_stopped;
    } else {
      ASSERT_EQ(*r.finish_reason, FinishReason::kLength);
      EXPECT_FALSE(stopped);
      const int32_t num_groups = static_cast<int32_t>(c_.kv.group_windows.size());
      bool pool_full = num_groups * ceil_div(r.num_tokens(), c_.kv.block_size) > c_.kv.num_blocks;
      EXPECT_TRUE(r.num_output_tokens() == r.max_tokens ||
                  r.num_tokens() == c_.sched.max_model_len || pool_full);
    }
    // Every generated token but the last was computed.
    EXPECT_EQ(r.num_computed_tokens, r.num_tokens() - 1);
  }

  const StressCase& c_;
  Scheduler sched_;
  BlockTableMirror mirror_;  // what the runner would hold
  std::mt19937 rng_;
  std::vector<std::vector<int32_t>> content_;  // [block][offset] token id written there
  std::vector<int32_t> templates_[3];
  std::set<int64_t> live_;
  int32_t num_finished_ = 0;
  int32_t num_rejected_ = 0;
};

TEST_P(SchedulerStress, InvariantsHoldEveryStep) {
  const StressCase& c = GetParam();
  Checker::Stats total;
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Checker checker(c, seed);
    checker.run();
    if (HasFatalFailure()) return;
    total.num_preemptions += checker.stats.num_preemptions;
    total.num_hit_tokens += checker.stats.num_hit_tokens;
    total.num_rejected += checker.stats.num_rejected;
    total.num_stopped += checker.stats.num_stopped;
    total.num_released_blocks += checker.stats.num_released_blocks;
  }
  EXPECT_GT(total.num_preemptions, 0);
  EXPECT_GT(total.num_rejected, 0);
  EXPECT_GT(total.num_stopped, 0);
  bool caching = c.kv.enable_prefix_caching;
  EXPECT_EQ(total.num_hit_tokens > 0, caching);
  bool windowed = std::any_of(c.kv.group_windows.begin(), c.kv.group_windows.end(),
                              [](int32_t w) { return w > 0; });
  EXPECT_EQ(total.num_released_blocks > 0, windowed);
  std::printf("[ stats    ] %s: %lld preemptions, %lld prefix-hit tokens, %d rejected, %d stopped\n",
              c.name.c_str(), static_cast<long long>(total.num_preemptions),
              static_cast<long long>(total.num_hit_tokens), total.num_rejected, total.num_stopped);
}

KvCacheConfig kv(int32_t num_blocks, int32_t block_size, bool caching,
                 std::vector<int32_t> windows = {0}) {
  return KvCacheConfig{num_blocks, block_size, caching, std::move(windows)};
}

INSTANTIATE_TEST_SUITE_P(
    Pools, SchedulerStress,
    ::testing::Values(
        StressCase{"caching", {16, 6, 64}, kv(24, 4, true)},
        StressCase{"no_caching", {16, 6, 64}, kv(24, 4, false)},
        StressCase{"block_size_1", {7, 4, 40}, kv(48, 1, true)},
        StressCase{"big_budget", {256, 16, 64}, kv(20, 4, true)},
        StressCase{"full_and_window", {16, 6, 64}, kv(40, 4, true, {0, 8})},
        StressCase{"window_only", {12, 5, 32}, kv(14, 2, false, {6})},
        StressCase{"window_only_caching", {12, 5, 32}, kv(16, 2, true, {6})},
        StressCase{"two_windows_caching", {16, 6, 64}, kv(48, 4, true, {0, 5, 8})}),
    [](const ::testing::TestParamInfo<StressCase>& info) { return info.param.name; });

}  // namespace
}  // namespace kvlm
