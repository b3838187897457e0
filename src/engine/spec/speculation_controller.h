// When and how much the engine speculates (docs/ARCHITECTURE.md
// "Speculative decoding"): the proposer, the cost averages adaptive K
// weighs, the proposals asked before each schedule, and what each
// verification gave. Engine thread only. The verification itself (a
// sampler's work) is Engine::verify_seq.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "common/strong_id.h"
#include "engine/spec/speculative.h"

namespace kvlm {

class Scheduler;
struct Request;
struct SchedulerOutput;

class SpeculationController {
 public:
  // The proposer `config` names (its own, an n-gram lookup, or none when
  // speculation is off). Throws Error(kInvalidArgument) for a draft mode
  // without its draft and for a K outside [0, 64].
  explicit SpeculationController(const SpeculativeConfig& config);
  SpeculationController() = default;  // off

  bool enabled() const { return proposer_ != nullptr; }

  // One step's proposals, in three calls: begin_step, then consider for
  // every live request, then propose. Without a proposer all are no-ops.
  void begin_step(int32_t num_running);
  // `request`: the scheduler's, null while it is not there (a tier lookup, a
  // parked choice). `speculates`: the request allows proposals now.
  // `adaptive`: its adaptive K, made here when first needed.
  void consider(RequestId id, const Request* request, bool speculates, std::optional<SpecController>& adaptive);
  // Asks the proposer, in one batch, and hands the drafts to the scheduler.
  void propose(Scheduler& scheduler);

  // The forward pass of a step took `seconds` (adaptive K's cost model).
  void record_forward(const SchedulerOutput& out, double seconds);
  // A sequence's verification: num_proposed proposals gave num_tokens tokens
  // (1 + the accepted ones).
  void record_verified(int32_t num_proposed, int32_t num_tokens, std::optional<SpecController>& adaptive);

  // Request `id` ended or waits: the proposer drops its state for it.
  void release(RequestId id) {
    if (proposer_) proposer_->release(id);
  }

  // For EngineMetrics: counters since the start, and the proposer's state now.
  struct Counters {
    int64_t num_proposed = 0, num_accepted = 0, num_steps = 0;
    std::array<int64_t, 16> tokens_per_step{};  // [n]: steps that gave n tokens (the last bucket: n or more)
    double propose_s = 0;  // the proposer's time (a draft model's forward passes)
  };
  const Counters& counters() const { return counters_; }
  int32_t num_draft_sequences() const { return proposer_ ? proposer_->num_sequences() : 0; }
  int64_t draft_kv_bytes() const { return proposer_ ? proposer_->kv_bytes() : 0; }

 private:
  SpeculativeConfig config_;
  std::shared_ptr<Proposer> proposer_;  // null unless speculation is on
  // Moving averages, in seconds, of one pass of the proposer (its time over
  // the longest proposal it made) and of a decode step's forward pass:
  // their ratio is a proposal's cost for adaptive K.
  double propose_pass_s_ = 0, decode_forward_s_ = 0;
  // This step's: the batch room left for proposals, a proposal's cost in
  // decode steps, and the questions asked so far.
  int32_t room_ = 0;
  double propose_cost_ = 0;
  std::vector<ProposalQuery> queries_;
  Counters counters_;
};

}  // namespace kvlm
