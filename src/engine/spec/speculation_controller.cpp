#include "engine/spec/speculation_controller.h"

#include <algorithm>
#include <chrono>
#include <climits>

#include "common/error.h"
#include "common/log.h"
#include "sched/scheduler.h"

namespace kvlm {
namespace {

// An exponential moving average (a tenth of the new value); the first value
// as it comes.
double moving_average(double average, double value) { return average == 0 ? value : 0.9 * average + 0.1 * value; }

}  // namespace

SpeculationController::SpeculationController(const SpeculativeConfig& config) : config_(config) {
  if (config_.proposer) {
    proposer_ = config_.proposer;
  } else if (config_.mode == SpeculateMode::kNgram) {
    proposer_ = std::make_shared<NgramProposer>(config_.min_ngram, config_.max_ngram);
  } else if (config_.mode == SpeculateMode::kDraft) {
    throw_error(ErrorCode::kInvalidArgument, "speculation with a draft model needs the draft: pass --draft-model "
                                             "FILE (a GGUF with the same vocabulary)");
  }
  if (config_.num_spec_tokens < 0 || config_.num_spec_tokens > 64)
    throw_error(ErrorCode::kInvalidArgument, "spec tokens {} must be in [0, 64] (0: adaptive)",
                config_.num_spec_tokens);
}

// Adaptive K (no --spec-tokens): none past the step's room, as a batch of
// max_batch_tokens tokens is compute-bound and a proposal there costs about
// what a decoded token does. A draft model's pass may cost a good part of
// the target's step: each proposal then costs that too, and pays only at a
// higher acceptance.
void SpeculationController::begin_step(int32_t num_running) {
  queries_.clear();
  room_ = config_.num_spec_tokens == 0 ? config_.max_batch_tokens - num_running : INT32_MAX;
  propose_cost_ = decode_forward_s_ > 0 ? propose_pass_s_ / decode_forward_s_ : 0.0;
}

// The room is reserved by the K asked for, before the proposer says how
// many it has.
void SpeculationController::consider(RequestId id, const Request* r, bool speculates,
                                     std::optional<SpecController>& adaptive) {
  if (!proposer_) return;
  // A request that waits (preempted, or not yet scheduled) may wait long:
  // the proposer's state for it (a draft model's KV) goes, and is built
  // again from the tokens if it runs again. No-op for a proposer without.
  if (!r || r->status != RequestStatus::kRunning) {
    proposer_->release(id);
    return;
  }
  if (room_ <= 0 || !speculates) return;
  if (r->kv_budget.enabled() || r->num_tokens() - r->num_computed_tokens != 1) return;
  int32_t k = config_.num_spec_tokens;
  if (k == 0) {
    if (!adaptive) adaptive.emplace(kMaxAdaptiveSpecTokens, config_.verify_cost);
    k = adaptive->num_tokens(propose_cost_);
  }
  k = std::min({k, room_, r->max_tokens - r->num_output_tokens() - 1});
  if (k <= 0) return;
  room_ -= k;
  queries_.push_back(ProposalQuery{id, r->tokens, r->num_prompt_tokens, k});
}

// One batch for every sequence: a draft model runs one forward pass per
// draft position for all of them.
void SpeculationController::propose(Scheduler& scheduler) {
  if (queries_.empty()) return;
  std::vector<std::vector<int32_t>> drafts;
  const auto t_begin = std::chrono::steady_clock::now();
  try {
    drafts = proposer_->propose_batch(queries_);
  } catch (const std::exception& e) {
    // A proposal is only a guess: a proposer that fails (a draft model out
    // of memory) costs this step's proposals, never the requests.
    log_warn("no proposals this step: {}", e.what());
    for (const ProposalQuery& q : queries_) proposer_->release(q.id);
    queries_.clear();
    return;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_begin).count();
  counters_.propose_s += seconds;
  size_t num_passes = 0;  // a draft model runs one pass per position of its longest proposal
  for (const auto& d : drafts) num_passes = std::max(num_passes, d.size());
  if (num_passes > 0) propose_pass_s_ = moving_average(propose_pass_s_, seconds / static_cast<double>(num_passes));
  for (size_t i = 0; i < queries_.size(); ++i) {
    if (drafts[i].empty()) continue;
    if (static_cast<int32_t>(drafts[i].size()) > queries_[i].max_tokens)
      drafts[i].resize(static_cast<size_t>(queries_[i].max_tokens));
    scheduler.set_draft(queries_[i].id, std::move(drafts[i]));
  }
  queries_.clear();  // their token spans are the requests', good for this step only
}

void SpeculationController::record_forward(const SchedulerOutput& out, double seconds) {
  if (!proposer_) return;
  // Decode steps only: a prompt chunk's pass costs more, and is no measure
  // of what a proposal costs against a decoded token.
  const bool decodes_only = std::all_of(out.seqs.begin(), out.seqs.end(), [](const ScheduledSeq& s) {
    return static_cast<int32_t>(s.new_tokens.size()) == 1 + s.num_spec_tokens;
  });
  if (decodes_only) decode_forward_s_ = moving_average(decode_forward_s_, seconds);
}

void SpeculationController::record_verified(int32_t num_proposed, int32_t num_tokens,
                                            std::optional<SpecController>& adaptive) {
  counters_.num_proposed += num_proposed;
  counters_.num_accepted += num_tokens - 1;
  ++counters_.num_steps;
  ++counters_.tokens_per_step[static_cast<size_t>(std::min<int32_t>(num_tokens, 15))];
  if (adaptive) adaptive->observe(num_proposed, num_tokens - 1);
}

}  // namespace kvlm
