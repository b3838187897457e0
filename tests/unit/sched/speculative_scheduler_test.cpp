// Speculative decoding in the scheduler: proposals verified in a decode step,
// the accepted ones committed, the rejected tail's slots rolled back. After
// each step the block tables, the pool and the prefix cache must be what they
// are when the same tokens are decoded one a step.
#include <gtest/gtest.h>

#include <map>
#include <numeric>

#include "sched/scheduler.h"

namespace kvlm {
// Named: the unity build puts this file beside the other scheduler tests.
namespace speculative_scheduler_test {

constexpr int32_t kBlockSize = 4;

std::unique_ptr<Request> make_request(int64_t id, int32_t num_prompt, int32_t max_tokens) {
  auto r = std::make_unique<Request>();
  r->id = RequestId(id);
  r->tokens.resize(static_cast<size_t>(num_prompt));
  std::iota(r->tokens.begin(), r->tokens.end(), 100);
  r->max_tokens = max_tokens;
  return r;
}

Scheduler make_scheduler() {
  KvCacheConfig kc;
  kc.num_blocks = 32;
  kc.block_size = kBlockSize;
  kc.enable_prefix_caching = true;
  return Scheduler(SchedulerConfig{64, 8, 256}, kc);
}

// The output every run produces: token i of the output is 7 * i % 50.
int32_t truth(int32_t i) { return 7 * i % 50; }

// Block ids may differ (a rolled-back block rejoins the free queue at its
// tail); what the blocks hold and what the prefix cache serves may not.
struct Snapshot {
  size_t num_table_entries = 0;
  int32_t num_free = 0;
  int32_t num_computed = 0;
  std::vector<int32_t> tokens;
  int32_t num_cached_tokens = 0;  // a prefix lookup of its tokens
  bool operator==(const Snapshot&) const = default;
};

Snapshot snapshot(Scheduler& s, RequestId id) {
  const Request* r = s.find(id);
  return {s.kv().table(id, 0).size(), s.kv().pool().num_free_blocks(), r->num_computed_tokens, r->tokens,
          s.kv_manager().find_prefix(r->tokens).num_tokens};
}

TEST(SpeculativeScheduler, RollbackLeavesWhatDecodingOneAtATimeLeaves) {
  const RequestId id(1);
  // One a step: snapshots by number of output tokens.
  std::map<int32_t, Snapshot> plain;
  {
    Scheduler s = make_scheduler();
    s.add_request(make_request(1, 6, 30));
    for (int32_t n = 0; s.has_unfinished(); ++n) {
      SchedulerOutput out = s.schedule();
      const int32_t token = truth(n);
      auto done = s.update(out, std::span<const int32_t>(&token, 1));
      if (done.empty()) plain[n + 1] = snapshot(s, id);
    }
  }
  // With proposals: 5 a step, the first `good` right, the rest wrong.
  Scheduler s = make_scheduler();
  s.add_request(make_request(1, 6, 30));
  int32_t num_output = 0, num_checked = 0;
  for (int32_t step = 0; s.has_unfinished(); ++step) {
    const Request* r = s.find(id);
    const int32_t good = step % 4;  // 0..3 accepted
    std::vector<int32_t> drafts;
    for (int32_t j = 0; j < 5; ++j) drafts.push_back(j < good ? truth(num_output + j) : 999);
    if (r->num_output_tokens() > 0) s.set_draft(id, drafts);
    SchedulerOutput out = s.schedule();
    ASSERT_EQ(out.seqs.size(), 1u);
    const int32_t k = out.seqs[0].num_spec_tokens;
    EXPECT_LE(k, 5);
    // The verifier keeps the right proposals and draws the true token next.
    std::vector<int32_t> sampled;
    for (int32_t j = 0; j <= k; ++j) {
      sampled.push_back(truth(num_output + j));
      if (j == k || out.seqs[0].new_tokens[static_cast<size_t>(1 + j)] != sampled.back()) break;
    }
    const int32_t n = static_cast<int32_t>(sampled.size());
    const std::vector<int32_t> counts = {n};
    auto done = s.update(out, sampled, {}, counts);
    num_output += n;
    if (!done.empty()) {
      EXPECT_EQ(done[0]->num_output_tokens(), 30);
      break;
    }
    ASSERT_TRUE(plain.count(num_output));
    EXPECT_EQ(snapshot(s, id), plain.at(num_output)) << "after " << num_output << " tokens";
    ++num_checked;
  }
  EXPECT_EQ(num_output, 30);
  EXPECT_GT(num_checked, 5);
  EXPECT_LT(num_checked, 29) << "some steps must have accepted proposals";
  EXPECT_EQ(s.kv().pool().num_free_blocks(), 32);
}

TEST(SpeculativeScheduler, ProposalsStayWithinMaxTokensAndTheStepBudget) {
  KvCacheConfig kc;
  kc.num_blocks = 32;
  kc.block_size = kBlockSize;
  Scheduler s(SchedulerConfig{4, 8, 256}, kc);
  s.add_request(make_request(1, 3, 4));
  SchedulerOutput out = s.schedule();  // the prompt
  int32_t t = 5;
  s.update(out, std::span<const int32_t>(&t, 1));
  s.set_draft(RequestId(1), {1, 2, 3, 4, 5, 6});
  out = s.schedule();
  EXPECT_EQ(out.seqs[0].num_spec_tokens, 2) << "max_tokens 4 - 1 output - the token after the proposals";
  s.update(out, std::span<const int32_t>(&t, 1));
  s.set_draft(RequestId(1), {1, 2, 3, 4, 5, 6});
  out = s.schedule();
  EXPECT_EQ(out.seqs[0].num_spec_tokens, 1);
  EXPECT_EQ(out.num_tokens, 2);
}

}  // namespace speculative_scheduler_test
}  // namespace kvlm
