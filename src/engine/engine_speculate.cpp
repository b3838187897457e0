// Speculative decoding in the step (engine/speculative.h): proposals before
// the schedule, and what the verification did, after the sampling. The
// verification itself is Engine::verify_seq (engine_sample.cpp).
#include <algorithm>
#include <chrono>
#include <climits>

#include "common/log.h"
#include "engine/engine.h"
#include "engine/engine_live.h"
#include "sched/scheduler.h"

namespace kvlm {
namespace {

// An exponential moving average (a tenth of the new value); the first value
// as it comes.
double moving_average(double average, double value) { return average == 0 ? value : 0.9 * average + 0.1 * value; }

}  // namespace

// Proposals for every decoding request that speculates, asked of the
// proposer in one batch (a draft model runs one forward pass per draft
// position for all of them). Adaptive K (no --spec-tokens): each sequence's
// SpecController, and none past the step's room: a batch of
// max_batch_tokens tokens is compute-bound, and a proposal there costs about
// what a decoded token does. The room is reserved by the K asked for, before
// the proposer says how many it has.
void Engine::propose_drafts() {
  if (!proposer_) return;
  const SpeculativeConfig& sc = config_.speculative;
  const bool adaptive = sc.num_spec_tokens == 0;
  int32_t room = adaptive ? sc.max_batch_tokens - scheduler_->num_running() : INT32_MAX;
  // A draft model's pass may cost a good part of the target's step: each
  // proposal then costs that too, and pays only at a higher acceptance.
  const double propose_cost = decode_forward_s_ > 0 ? propose_pass_s_ / decode_forward_s_ : 0.0;
  std::vector<ProposalQuery> queries;
  for (auto& [id, live] : live_) {
    const Request* r = scheduler_->find(id);
    // A request that waits (preempted, or not yet scheduled) may wait long:
    // the proposer's state for it (a draft model's KV) goes, and is built
    // again from the tokens if it runs again. No-op for a proposer without.
    if (!r || r->status != RequestStatus::kRunning) {
      proposer_->release(id);
      continue;
    }
    if (room <= 0) continue;
    // A thinking section forces tokens and moves its grammar's start: such
    // a request decodes one token a step.
    if (!live->speculative || live->thinking) continue;
    if (r->kv_budget.enabled() || r->num_tokens() - r->num_computed_tokens != 1) continue;
    int32_t k = sc.num_spec_tokens;
    if (adaptive) {
      if (!live->spec) live->spec.emplace(kMaxAdaptiveSpecTokens, sc.verify_cost);
      k = live->spec->num_tokens(propose_cost);
    }
    k = std::min({k, room, r->max_tokens - r->num_output_tokens() - 1});
    if (k <= 0) continue;
    room -= k;
    queries.push_back(ProposalQuery{id, r->tokens, r->num_prompt_tokens, k});
  }
  if (queries.empty()) return;
  std::vector<std::vector<int32_t>> drafts;
  const auto t_begin = std::chrono::steady_clock::now();
  try {
    drafts = proposer_->propose_batch(queries);
  } catch (const std::exception& e) {
    // A proposal is only a guess: a proposer that fails (a draft model out
    // of memory) costs this step's proposals, never the requests.
    log_warn("no proposals this step: {}", e.what());
    for (const ProposalQuery& q : queries) proposer_->release(q.id);
    return;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_begin).count();
  {
    std::lock_guard lock(mu_);
    metrics_.spec_propose_s += seconds;
  }
  size_t num_passes = 0;  // a draft model runs one pass per position of its longest proposal
  for (const auto& d : drafts) num_passes = std::max(num_passes, d.size());
  if (num_passes > 0) propose_pass_s_ = moving_average(propose_pass_s_, seconds / static_cast<double>(num_passes));
  for (size_t i = 0; i < queries.size(); ++i) {
    if (drafts[i].empty()) continue;
    if (static_cast<int32_t>(drafts[i].size()) > queries[i].max_tokens)
      drafts[i].resize(static_cast<size_t>(queries[i].max_tokens));
    scheduler_->set_draft(queries[i].id, std::move(drafts[i]));
  }
}

void Engine::record_decode_forward(const SchedulerOutput& out, double seconds) {
  // Decode steps only: a prompt chunk's pass costs more, and is no measure
  // of what a proposal costs against a decoded token.
  const bool decodes_only = std::all_of(out.seqs.begin(), out.seqs.end(), [](const ScheduledSeq& s) {
    return static_cast<int32_t>(s.new_tokens.size()) == 1 + s.num_spec_tokens;
  });
  if (proposer_ && decodes_only) decode_forward_s_ = moving_average(decode_forward_s_, seconds);
}

void Engine::record_speculation(const SchedulerOutput& out, const SampledBatch& batch) {
  int64_t num_proposed = 0, num_accepted = 0, num_steps = 0;
  std::array<int64_t, 16> per_step{};
  size_t k = 0;
  for (const ScheduledSeq& s : out.seqs) {
    if (!s.sample) continue;
    const int32_t n = batch.num_tokens[k++];
    if (s.num_spec_tokens == 0) continue;
    const bool failed = std::any_of(batch.failed.begin(), batch.failed.end(), [&](const auto& f) { return f.first == s.id; });
    if (failed) continue;
    num_proposed += s.num_spec_tokens;
    num_accepted += n - 1;
    ++num_steps;
    ++per_step[static_cast<size_t>(std::min<int32_t>(n, 15))];
    if (Live& live = *live_.at(s.id); live.spec) live.spec->observe(s.num_spec_tokens, n - 1);
  }
  if (num_steps == 0) return;
  std::lock_guard lock(mu_);
  metrics_.num_spec_proposed += num_proposed;
  metrics_.num_spec_accepted += num_accepted;
  metrics_.num_spec_steps += num_steps;
  for (size_t i = 0; i < per_step.size(); ++i) metrics_.spec_tokens_per_step[i] += per_step[i];
}

}  // namespace kvlm
