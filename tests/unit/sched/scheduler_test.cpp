// Scheduler: token budget, chunked prefill, preemption, admission and
// finishing, driven by a fake model that samples token = step index.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "common/error.h"
#include "sched/scheduler.h"

namespace kvlm {
namespace {

std::unique_ptr<Request> make_request(int64_t id, int32_t num_prompt, int32_t max_tokens) {
  auto r = std::make_unique<Request>();
  r->id = RequestId(id);
  r->tokens.resize(static_cast<size_t>(num_prompt));
  // Distinct per request so no two prompts share a cached block by accident.
  std::iota(r->tokens.begin(), r->tokens.end(), static_cast<int32_t>(1000 * id));
  r->max_tokens = max_tokens;
  return r;
}

KvCacheConfig kv_config(int32_t num_blocks, int32_t block_size, bool caching = false) {
  KvCacheConfig c;
  c.num_blocks = num_blocks;
  c.block_size = block_size;
  c.enable_prefix_caching = caching;
  return c;
}

SchedulerConfig sched_config(int32_t budget, int32_t max_seqs = 64, int32_t max_model_len = 256) {
  return SchedulerConfig{budget, max_seqs, max_model_len};
}

std::vector<int32_t> num_new(const SchedulerOutput& out) {
  std::vector<int32_t> n;
  for (const ScheduledSeq& s : out.seqs) n.push_back(static_cast<int32_t>(s.new_tokens.size()));
  return n;
}

std::vector<int64_t> seq_ids(const SchedulerOutput& out) {
  std::vector<int64_t> v;
  for (const ScheduledSeq& s : out.seqs) v.push_back(s.id.value());
  return v;
}

// The scheduler plus a fake model: every sampled token is the step number.
struct Harness {
  Harness(SchedulerConfig sc, KvCacheConfig kc) : sched(sc, kc), num_blocks(kc.num_blocks) {}

  SchedulerOutput step() {
    ++num_steps;
    SchedulerOutput out = sched.schedule();
    // As the runner does: its copy of the tables, from the changes.
    for (RequestId id : out.released_tables) mirror.forget(id);
    for (const ScheduledSeq& s : out.seqs) tables[s.id.value()] = mirror.apply(s.id, s.table_changes);
    std::vector<int32_t> sampled;
    for (const ScheduledSeq& s : out.seqs) {
      if (s.sample) sampled.push_back(num_steps);
    }
    for (auto& r : sched.update(out, sampled)) finished.push_back(std::move(r));
    return out;
  }

  const Request& finished_request(int64_t id) const {
    for (const auto& r : finished) {
      if (r->id == RequestId(id)) return *r;
    }
    throw std::runtime_error("request " + std::to_string(id) + " has not finished");
  }

  std::vector<int32_t> output_of(int64_t id) const {
    const Request& r = finished_request(id);
    return {r.tokens.begin() + r.num_prompt_tokens, r.tokens.end()};
  }

  bool pool_whole() const { return sched.kv().pool().num_free_blocks() == num_blocks; }

  // The runner's copy of a seq's table for `group` after its step.
  const std::vector<int32_t>& table(const ScheduledSeq& s, int32_t group) const {
    return tables.at(s.id.value())[static_cast<size_t>(group)].ids;
  }
  int32_t num_released(const ScheduledSeq& s, int32_t group) const {
    return tables.at(s.id.value())[static_cast<size_t>(group)].num_released;
  }

  Scheduler sched;
  int32_t num_blocks;
  int32_t num_steps = 0;
  std::vector<std::unique_ptr<Request>> finished;
  BlockTableMirror mirror;
  std::map<int64_t, std::vector<BlockTableMirror::Table>> tables;  // as of each seq's last step
};

TEST(Request, FinishReasonNames) {
  EXPECT_EQ(finish_reason_name(FinishReason::kStop), "stop");
  EXPECT_EQ(finish_reason_name(FinishReason::kLength), "length");
  EXPECT_EQ(finish_reason_name(FinishReason::kAborted), "abort");
}

TEST(Scheduler, ChunkedPrefillThenDecode) {
  Harness h(sched_config(32), kv_config(64, 16));
  h.sched.add_request(make_request(1, 100, 3));
  const std::vector<int32_t> starts = {0, 32, 64, 96, 100, 101};
  const std::vector<int32_t> sizes = {32, 32, 32, 4, 1, 1};
  const std::vector<size_t> table_sizes = {2, 4, 6, 7, 7, 7};
  for (size_t i = 0; i < starts.size(); ++i) {
    SchedulerOutput out = h.step();
    ASSERT_EQ(out.seqs.size(), 1u) << "step " << i + 1;
    const ScheduledSeq& s = out.seqs[0];
    EXPECT_EQ(s.num_computed, starts[i]);
    EXPECT_EQ(static_cast<int32_t>(s.new_tokens.size()), sizes[i]);
    EXPECT_EQ(out.num_tokens, sizes[i]);
    EXPECT_EQ(s.sample, i >= 3);
    ASSERT_EQ(s.table_changes.size(), 1u);
    EXPECT_EQ(h.table(s, 0).size(), table_sizes[i]);
    EXPECT_EQ(h.num_released(s, 0), 0);
    // After the first step only what grew travels: the 2 new blocks of a
    // 32-token chunk, 1 for the last chunk, none for a decode in a block.
    const std::vector<size_t> appended = {2, 2, 2, 1, 0, 0};
    EXPECT_EQ(s.table_changes[0].append.size(), appended[i]) << "step " << i + 1;
    if (i == 0) {
      EXPECT_EQ(s.new_tokens[0], 1000);
    }
    if (i == 4) {
      EXPECT_EQ(s.new_tokens, std::vector<int32_t>{4});  // the sampled token
    }
  }
  EXPECT_FALSE(h.sched.has_unfinished());
  SchedulerOutput last = h.step();  // only tells the runner to forget the finished table
  EXPECT_TRUE(last.seqs.empty());
  EXPECT_EQ(last.released_tables, std::vector<RequestId>{RequestId(1)});
  EXPECT_EQ(h.mirror.num_requests(), 0u);
  EXPECT_TRUE(h.step().empty());
  EXPECT_EQ(h.output_of(1), (std::vector<int32_t>{4, 5, 6}));
  EXPECT_EQ(h.finished_request(1).finish_reason, FinishReason::kLength);
  EXPECT_EQ(h.finished_request(1).status, RequestStatus::kFinished);
  EXPECT_EQ(h.finished_request(1).num_computed_tokens, 102);
  EXPECT_TRUE(h.pool_whole());
}

TEST(Scheduler, DecodesGoFirstThenPrefillsFillTheBudget) {
  Harness h(sched_config(10), kv_config(64, 4));
  h.sched.add_request(make_request(1, 4, 10));
  SchedulerOutput out = h.step();
  EXPECT_EQ(num_new(out), std::vector<int32_t>{4});
  h.sched.add_request(make_request(2, 20, 2));
  h.sched.add_request(make_request(3, 5, 2));
  out = h.step();  // decode of 1, then 9 of request 2's prompt; 3 gets nothing
  EXPECT_EQ(seq_ids(out), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(num_new(out), (std::vector<int32_t>{1, 9}));
  EXPECT_EQ(out.num_tokens, 10);
  EXPECT_EQ(h.sched.num_waiting(), 1);
  out = h.step();  // running requests in admission order
  EXPECT_EQ(seq_ids(out), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(num_new(out), (std::vector<int32_t>{1, 9}));
  out = h.step();
  EXPECT_EQ(seq_ids(out), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(num_new(out), (std::vector<int32_t>{1, 2, 5}));
  EXPECT_EQ(out.num_tokens, 8);
  EXPECT_TRUE(out.seqs[1].sample);
  EXPECT_EQ(out.seqs[2].num_computed, 0);
  while (h.sched.has_unfinished()) h.step();
  EXPECT_EQ(h.finished.size(), 3u);
  EXPECT_TRUE(h.pool_whole());
}

TEST(Scheduler, BudgetCutsOffRunningRequests) {
  Harness h(sched_config(3), kv_config(64, 4));
  for (int64_t id = 1; id <= 4; ++id) h.sched.add_request(make_request(id, 1, 5));
  SchedulerOutput out = h.step();
  EXPECT_EQ(seq_ids(out), (std::vector<int64_t>{1, 2, 3}));
  out = h.step();  // decodes of 1..3 spend the budget; 4 still waits
  EXPECT_EQ(seq_ids(out), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(h.sched.num_waiting(), 1);
  while (h.sched.has_unfinished()) h.step();
  EXPECT_TRUE(h.pool_whole());
}

TEST(Scheduler, MaxNumSeqsCapsRunning) {
  Harness h(sched_config(100, /*max_seqs=*/2), kv_config(64, 4));
  h.sched.add_request(make_request(1, 3, 2));
  h.sched.add_request(make_request(2, 3, 3));
  h.sched.add_request(make_request(3, 3, 1));
  SchedulerOutput out = h.step();
  EXPECT_EQ(seq_ids(out), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(h.sched.num_running(), 2);
  EXPECT_EQ(h.sched.num_waiting(), 1);
  out = h.step();  // 1 finishes after this step
  EXPECT_EQ(seq_ids(out), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(h.finished.size(), 1u);
  out = h.step();
  EXPECT_EQ(seq_ids(out), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(h.sched.num_running(), 0);  // both finished in this step
  EXPECT_EQ(h.finished_request(3).finish_reason, FinishReason::kLength);
  EXPECT_EQ(h.output_of(2), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_TRUE(h.pool_whole());
}

TEST(Scheduler, PreemptsMostRecentlyAdmittedAndRequeuesAtFront) {
  // 6 blocks of 4 slots; three 7..8-token prompts fill the pool exactly.
  Harness h(sched_config(100), kv_config(6, 4));
  h.sched.add_request(make_request(1, 8, 4));
  h.sched.add_request(make_request(2, 8, 4));
  h.sched.add_request(make_request(3, 7, 4));
  h.sched.add_request(make_request(4, 4, 1));  // no block left for it
  SchedulerOutput out = h.step();
  EXPECT_EQ(seq_ids(out), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(h.sched.kv().pool().num_free_blocks(), 0);

  // 1 and 2 each need a third block for slot 8: 3 (newest) gives way.
  out = h.step();
  EXPECT_EQ(seq_ids(out), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(out.preempted, std::vector<RequestId>{RequestId(3)});
  EXPECT_EQ(h.sched.num_preemptions(), 1);
  const Request* r3 = h.sched.find(RequestId(3));
  ASSERT_NE(r3, nullptr);
  EXPECT_EQ(r3->status, RequestStatus::kWaiting);
  EXPECT_EQ(r3->num_computed_tokens, 0);
  EXPECT_EQ(r3->num_preemptions, 1);
  EXPECT_EQ(r3->num_tokens(), 8);  // its sampled token is kept
  EXPECT_FALSE(h.sched.kv().has_request(RequestId(3)));
  EXPECT_EQ(h.sched.num_waiting(), 2);

  out = h.step();  // no room: 3 waits at the head, 4 behind it
  EXPECT_EQ(seq_ids(out), (std::vector<int64_t>{1, 2}));
  out = h.step();  // 1 and 2 finish
  EXPECT_EQ(h.finished.size(), 2u);

  out = h.step();  // 3 resumes from scratch before 4
  EXPECT_EQ(seq_ids(out), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(out.seqs[0].num_computed, 0);
  EXPECT_EQ(out.seqs[0].new_tokens.size(), 8u);
  EXPECT_EQ(out.seqs[0].new_tokens.back(), 1);  // sampled at step 1
  EXPECT_TRUE(out.seqs[0].sample);
  while (h.sched.has_unfinished()) h.step();
  EXPECT_EQ(h.output_of(3), (std::vector<int32_t>{1, 5, 6, 7}));
  EXPECT_EQ(h.finished_request(3).num_preemptions, 1);
  EXPECT_EQ(h.output_of(4), std::vector<int32_t>{5});
  EXPECT_TRUE(h.pool_whole());
}

TEST(Scheduler, PreemptsItselfWhenNewest) {
  // Two requests; the newer one needs a block and is the only victim.
  Harness h(sched_config(100), kv_config(3, 4));
  h.sched.add_request(make_request(1, 3, 8));  // slots 0..2: block for slot 4 later
  h.sched.add_request(make_request(2, 8, 4));
  SchedulerOutput out = h.step();
  EXPECT_EQ(seq_ids(out), (std::vector<int64_t>{1, 2}));
  out = h.step();  // 1 decodes at slot 3 (its block); 2 needs block 3 of 3: none
  EXPECT_EQ(seq_ids(out), std::vector<int64_t>{1});
  EXPECT_EQ(out.preempted, std::vector<RequestId>{RequestId(2)});
  out = h.step();  // 1 takes a second block; 2 (9 tokens, 3 blocks) cannot come back
  EXPECT_EQ(seq_ids(out), std::vector<int64_t>{1});
  while (h.sched.has_unfinished()) h.step();
  EXPECT_EQ(h.finished_request(2).num_preemptions, 1);
  EXPECT_EQ(h.output_of(2).size(), 4u);
  EXPECT_TRUE(h.pool_whole());
}

TEST(Scheduler, PreemptedRequestRecoversPrefixHits) {
  Harness h(sched_config(100), kv_config(7, 4, /*caching=*/true));
  h.sched.add_request(make_request(1, 8, 4));  // blocks 0,1
  h.sched.add_request(make_request(2, 8, 4));  // blocks 2,3
  h.sched.add_request(make_request(3, 8, 4));  // blocks 4,5
  h.step();
  EXPECT_EQ(h.sched.kv().pool().num_cached_blocks(), 6u);

  // 1 takes block 6; 2 preempts 3, whose blocks go back last-first (5, 4),
  // and takes 5: only 3's first block (4) stays cached.
  SchedulerOutput out = h.step();
  EXPECT_EQ(out.preempted, std::vector<RequestId>{RequestId(3)});
  EXPECT_EQ(h.table(out.seqs[1], 0), (std::vector<int32_t>{2, 3, 5}));
  EXPECT_EQ(out.released_tables, std::vector<RequestId>{RequestId(3)});
  EXPECT_EQ(h.sched.kv().pool().free_queue_order(), std::vector<BlockId>{BlockId(4)});

  out = h.step();  // 3 would hit block 4 but needs 2 more: not admitted
  EXPECT_EQ(seq_ids(out), (std::vector<int64_t>{1, 2}));
  out = h.step();  // 1 and 2 finish: queue 4, 6,1,0, 5,3,2
  EXPECT_EQ(h.finished.size(), 2u);

  out = h.step();
  ASSERT_EQ(seq_ids(out), std::vector<int64_t>{3});
  const ScheduledSeq& s = out.seqs[0];
  EXPECT_EQ(s.num_computed, 4);
  EXPECT_EQ(s.new_tokens.size(), 5u);  // tokens 4..8, incl. the one sampled at step 1
  EXPECT_EQ(h.table(s, 0), (std::vector<int32_t>{4, 6, 1}));
  EXPECT_EQ(s.table_changes[0].keep, 0);  // re-admitted: the whole table again
  const Request* r3 = h.sched.find(RequestId(3));
  EXPECT_EQ(r3->num_computed_tokens, 9);
  EXPECT_EQ(r3->num_cached_tokens, 0);  // recorded at first admission only
  while (h.sched.has_unfinished()) h.step();
  EXPECT_EQ(h.output_of(3), (std::vector<int32_t>{1, 5, 6, 7}));
  EXPECT_TRUE(h.pool_whole());
}

TEST(Scheduler, FirstAdmissionRecordsCachedTokens) {
  Harness h(sched_config(100), kv_config(16, 4, /*caching=*/true));
  h.sched.add_request(make_request(1, 10, 1));
  h.step();
  ASSERT_EQ(h.finished.size(), 1u);
  auto r = make_request(2, 0, 2);
  r->tokens = h.finished_request(1).tokens;  // 10 prompt tokens + 1 output
  r->tokens.push_back(42);                   // 12 tokens
  r->cache_salt = 0;
  h.sched.add_request(std::move(r));
  SchedulerOutput out = h.step();
  EXPECT_EQ(out.seqs[0].num_computed, 8);
  EXPECT_EQ(out.seqs[0].new_tokens, (std::vector<int32_t>{1008, 1009, 1, 42}));
  EXPECT_EQ(h.sched.find(RequestId(2))->num_cached_tokens, 8);
  EXPECT_EQ(h.sched.kv().num_prefix_hit_tokens(), 8);
  EXPECT_EQ(h.sched.kv().num_prefix_query_tokens(), 10 + 12);

  auto salted = make_request(3, 0, 1);
  salted->tokens = h.finished_request(1).tokens;
  salted->cache_salt = 9;
  h.sched.add_request(std::move(salted));
  out = h.step();
  EXPECT_EQ(out.seqs.back().num_computed, 0);
  while (h.sched.has_unfinished()) h.step();
  EXPECT_TRUE(h.pool_whole());
}

// Two requests of one 12-token prefix sent together: the second waits one
// step while the first computes it, then takes its 3 blocks from the cache;
// a request behind them with another prompt is not held up.
TEST(Scheduler, ARequestWaitsAStepForItsPrefixInFlight) {
  Harness h(sched_config(100), kv_config(32, 4, /*caching=*/true));
  auto a = make_request(1, 14, 2), b = make_request(2, 14, 2);
  b->tokens.assign(a->tokens.begin(), a->tokens.begin() + 12);  // the same 3 full blocks, then its own
  b->tokens.insert(b->tokens.end(), {77, 78});
  h.sched.add_request(std::move(a));
  h.sched.add_request(std::move(b));
  h.sched.add_request(make_request(3, 6, 1));
  SchedulerOutput out = h.step();
  EXPECT_EQ(seq_ids(out), (std::vector<int64_t>{1, 3})) << "2 waits for 1's blocks";
  out = h.step();
  ASSERT_EQ(seq_ids(out).back(), 2);
  EXPECT_EQ(out.seqs.back().num_computed, 12) << "its three blocks came from the cache";
  EXPECT_EQ(h.sched.find(RequestId(2))->num_cached_tokens, 12);
  while (h.sched.has_unfinished()) h.step();
  EXPECT_TRUE(h.pool_whole());
}

// Without prefix caching nothing waits.
TEST(Scheduler, NothingWaitsWithoutPrefixCaching) {
  Harness h(sched_config(100), kv_config(32, 4, /*caching=*/false));
  auto a = make_request(1, 14, 1), b = make_request(2, 14, 1);
  b->tokens = a->tokens;
  h.sched.add_request(std::move(a));
  h.sched.add_request(std::move(b));
  EXPECT_EQ(seq_ids(h.step()), (std::vector<int64_t>{1, 2}));
}

TEST(Scheduler, HeadOfLineRequestBlocksLaterOnes) {
  Harness h(sched_config(100), kv_config(4, 4));
  h.sched.add_request(make_request(1, 8, 4));   // 2 blocks, a third from slot 8
  h.sched.add_request(make_request(2, 12, 1));  // 3 blocks: waits
  h.sched.add_request(make_request(3, 2, 1));   // 1 block would fit, but FIFO
  for (int step = 1; step <= 4; ++step) {
    SchedulerOutput out = h.step();
    EXPECT_EQ(seq_ids(out), std::vector<int64_t>{1}) << "step " << step;
    if (step == 3) {
      EXPECT_EQ(h.sched.num_waiting(), 2);
      EXPECT_EQ(h.sched.kv().pool().num_free_blocks(), 1);
    }
  }
  ASSERT_EQ(h.finished.size(), 1u);
  SchedulerOutput out = h.step();  // 1 finished: 2, then 3
  EXPECT_EQ(seq_ids(out), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(h.finished.size(), 3u);
  EXPECT_TRUE(h.pool_whole());
}

TEST(Scheduler, RejectsPromptsThatCanNeverRun) {
  Scheduler s(sched_config(100, 64, /*max_model_len=*/40), kv_config(4, 4));
  try {
    s.add_request(make_request(1, 16, 4));  // 17 tokens need 5 blocks of 4
    FAIL() << "accepted a prompt larger than the pool";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfRange);
    std::string msg = e.what();
    EXPECT_NE(msg.find("16 tokens"), std::string::npos) << msg;
    EXPECT_NE(msg.find("5 KV blocks"), std::string::npos) << msg;
    EXPECT_NE(msg.find("only 4 blocks"), std::string::npos) << msg;
  }
  s.add_request(make_request(2, 15, 4));  // 16 tokens: exactly the pool
  try {
    s.add_request(make_request(3, 40, 4));
    FAIL() << "accepted a prompt as long as the context";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfRange);
    EXPECT_NE(std::string(e.what()).find("40 tokens"), std::string::npos) << e.what();
  }
  try {
    s.add_request(make_request(4, 0, 4));
    FAIL() << "accepted an empty prompt";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
  EXPECT_EQ(s.num_waiting(), 1);
  EXPECT_EQ(s.find(RequestId(1)), nullptr);
}

TEST(Scheduler, ClampsMaxTokensToContext) {
  Harness h(sched_config(100, 64, /*max_model_len=*/32), kv_config(64, 4));
  h.sched.add_request(make_request(1, 20, 100));
  EXPECT_EQ(h.sched.find(RequestId(1))->max_tokens, 12);
  h.sched.add_request(make_request(2, 31, 5));  // room for exactly one token
  EXPECT_EQ(h.sched.find(RequestId(2))->max_tokens, 1);
  while (h.sched.has_unfinished()) h.step();
  EXPECT_EQ(h.output_of(1).size(), 12u);
  EXPECT_EQ(h.finished_request(1).num_tokens(), 32);
  EXPECT_EQ(h.finished_request(1).finish_reason, FinishReason::kLength);
  EXPECT_EQ(h.output_of(2).size(), 1u);
  EXPECT_TRUE(h.pool_whole());
}

TEST(Scheduler, PoolLimitsContextWhenSmallerThanModel) {
  // 2 blocks of 4 hold 8 slots: the 9th token could never be computed.
  Harness h(sched_config(100, 64, 100), kv_config(2, 4));
  h.sched.add_request(make_request(1, 4, 50));
  while (h.sched.has_unfinished()) h.step();
  EXPECT_EQ(h.finished_request(1).num_tokens(), 9);
  EXPECT_EQ(h.finished_request(1).finish_reason, FinishReason::kLength);
  EXPECT_TRUE(h.pool_whole());
}

TEST(Scheduler, StopTokenFinishes) {
  Harness h(sched_config(100), kv_config(16, 4));
  auto r = make_request(1, 5, 10);
  r->stop_token_ids = {3, 99};
  h.sched.add_request(std::move(r));
  h.sched.add_request(make_request(2, 5, 10));  // no stop tokens: runs on
  h.step();
  h.step();
  EXPECT_TRUE(h.finished.empty());
  h.step();
  ASSERT_EQ(h.finished.size(), 1u);
  EXPECT_EQ(h.finished[0]->id, RequestId(1));
  EXPECT_EQ(h.finished[0]->finish_reason, FinishReason::kStop);
  EXPECT_EQ(h.output_of(1), (std::vector<int32_t>{1, 2, 3}));
  while (h.sched.has_unfinished()) h.step();
  EXPECT_EQ(h.output_of(2).size(), 10u);
  EXPECT_TRUE(h.pool_whole());
}

TEST(Scheduler, StopTokenWinsOverLength) {
  Harness h(sched_config(100), kv_config(16, 4));
  auto r = make_request(1, 5, 1);
  r->stop_token_ids = {1};
  h.sched.add_request(std::move(r));
  h.step();
  EXPECT_EQ(h.finished_request(1).finish_reason, FinishReason::kStop);
}

TEST(Scheduler, FinishWaitingAndRunning) {
  Harness h(sched_config(100, /*max_seqs=*/1), kv_config(16, 4));
  h.sched.add_request(make_request(1, 6, 10));
  h.sched.add_request(make_request(2, 6, 10));
  h.step();
  EXPECT_EQ(h.sched.num_running(), 1);
  EXPECT_EQ(h.sched.num_waiting(), 1);

  std::unique_ptr<Request> w = h.sched.finish(RequestId(2), FinishReason::kAborted);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->status, RequestStatus::kFinished);
  EXPECT_EQ(w->finish_reason, FinishReason::kAborted);
  EXPECT_EQ(h.sched.num_waiting(), 0);

  EXPECT_EQ(h.sched.kv().pool().num_used_blocks(), 2);
  std::unique_ptr<Request> r = h.sched.finish(RequestId(1), FinishReason::kStop);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->finish_reason, FinishReason::kStop);
  EXPECT_EQ(r->num_output_tokens(), 1);
  EXPECT_EQ(h.sched.num_running(), 0);
  EXPECT_FALSE(h.sched.has_unfinished());
  EXPECT_EQ(h.sched.finish(RequestId(1), FinishReason::kAborted), nullptr);
  EXPECT_EQ(h.sched.finish(RequestId(7), FinishReason::kAborted), nullptr);
  EXPECT_TRUE(h.pool_whole());
}

TEST(Scheduler, FinishBetweenScheduleAndUpdate) {
  Scheduler s(sched_config(100), kv_config(16, 4));
  s.add_request(make_request(1, 5, 3));
  s.add_request(make_request(2, 5, 3));
  SchedulerOutput out = s.schedule();
  ASSERT_EQ(out.seqs.size(), 2u);
  ASSERT_NE(s.finish(RequestId(1), FinishReason::kAborted), nullptr);
  std::vector<int32_t> sampled = {7, 8};
  auto done = s.update(out, sampled);
  EXPECT_TRUE(done.empty());
  const Request* r2 = s.find(RequestId(2));
  ASSERT_NE(r2, nullptr);
  EXPECT_EQ(r2->tokens.back(), 8);  // request 1's token was skipped, not shifted
  EXPECT_EQ(r2->num_computed_tokens, 5);
  s.finish(RequestId(2), FinishReason::kAborted);
  EXPECT_EQ(s.kv().pool().num_free_blocks(), 16);
}

TEST(Scheduler, OutputCarriesBlockTables) {
  KvCacheConfig kc = kv_config(32, 4);
  kc.group_windows = {0, 4};
  Harness h(sched_config(100), kc);
  h.sched.add_request(make_request(1, 9, 4));
  SchedulerOutput out = h.step();
  const ScheduledSeq& s = out.seqs[0];
  ASSERT_EQ(s.table_changes.size(), 2u);
  EXPECT_EQ(h.table(s, 0), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(h.table(s, 1), (std::vector<int32_t>{3, 4, 5}));
  EXPECT_EQ(h.num_released(s, 0), 0);
  EXPECT_EQ(h.num_released(s, 1), 0);
  out = h.step();  // the query at slot 9 sees 6..9: group 1 dropped block 0 (slots 0..3)
  EXPECT_EQ(h.num_released(out.seqs[0], 0), 0);
  EXPECT_EQ(h.num_released(out.seqs[0], 1), 1);
  EXPECT_EQ(out.seqs[0].table_changes[1].keep, 3);  // nothing else changed
  EXPECT_TRUE(out.seqs[0].table_changes[1].append.empty());
  while (h.sched.has_unfinished()) h.step();
  EXPECT_TRUE(h.pool_whole());
}

TEST(Scheduler, RejectsBadConfig) {
  EXPECT_THROW(Scheduler(sched_config(0), kv_config(4, 4)), Error);
  EXPECT_THROW(Scheduler(sched_config(8, 0), kv_config(4, 4)), Error);
  EXPECT_THROW(Scheduler(sched_config(8, 4, 1), kv_config(4, 4)), Error);
  EXPECT_THROW(Scheduler(sched_config(8), kv_config(0, 4)), Error);
}

}  // namespace
}  // namespace kvlm
