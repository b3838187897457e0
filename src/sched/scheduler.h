// Continuous-batching scheduler (docs/ARCHITECTURE.md "The life of a request"). Each step:
//   1. running requests first, in admission order, each taking what it still
//      needs (1 token for a decode, a chunk for an unfinished prompt) from the
//      step's token budget; when the pool is short, the most recently admitted
//      running request is preempted (blocks freed, requeued at the front,
//      recomputed later) until the request fits or is itself preempted;
//   2. then, if nothing was preempted this step, waiting requests in FIFO
//      order, each starting after its prefix-cache hit, while the budget, the
//      sequence cap and the pool allow. A waiting request whose next prompt
//      block another request computes in this step waits a step (at most 64)
//      and then takes it from the prefix cache: requests of one prefix sent
//      together compute it once.
// The scheduler owns the KvCacheManager; the runner keeps a copy of the block
// tables from the changes each SchedulerOutput carries (kv/block_table.h).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "sched/request.h"

namespace kvlm {

struct SchedulerConfig {
  int32_t max_num_batched_tokens = 2048;  // token budget of one step
  int32_t max_num_seqs = 64;              // running requests at most
  int32_t max_model_len = 2048;           // prompt + output tokens of one request at most
  // KV chunks: the layer whose K/V deviation chooses the tokens a blend
  // recomputes (kv/kv_chunks.h).
  int32_t kv_blend_probe_layer = 1;
};

// One request's share of a step. Plain data: the runner needs nothing else.
struct ScheduledSeq {
  RequestId id;
  const LoraAdapter* lora = nullptr;  // Request::lora
  int32_t num_computed = 0;   // tokens already computed (index of the first new token)
  int32_t slot_begin = 0;     // KV slot of the first new token (== num_computed until tokens were dropped)
  int32_t position_begin = 0; // its position: num_computed, or slot_begin with --kv-shift
  std::vector<int32_t> new_tokens;  // tokens [num_computed, num_computed + new_tokens.size())
  // A blend (Request::blend): new_tokens are the prompt's tokens at
  // num_computed + row_offsets[i] (ascending), and the step covers
  // num_covered positions from num_computed; the others' KV was copied from
  // KV chunks. Empty: the rows are contiguous. A probe step's seqs start at
  // slot_begin and cover nothing.
  std::vector<int32_t> row_offsets;
  int32_t num_covered = 0;
  bool sample = false;        // all known tokens computed after this step: sample the next
  // Speculative decoding: the last num_spec_tokens of new_tokens are proposed
  // tokens (Request::draft_tokens), not known ones. Each of the last
  // 1 + num_spec_tokens new tokens then has a sampling row; update() takes
  // 1 + (proposals accepted) tokens and rolls the rest back.
  int32_t num_spec_tokens = 0;
  // Leading new tokens that are prompt positions whose next-token logits are
  // wanted (Request::prompt_logits): positions num_computed .. + this - 1,
  // never the last prompt position (that one is the sampling row). With an
  // entropy policy: every new token but the sampling row.
  int32_t num_prompt_logits = 0;
  int32_t first_prompt_logit_row = 0;  // the first of them, among new_tokens (prompt_logits_from)
  // An embedding request (Request::pooling): the last num_hidden_rows new
  // tokens' final hidden states are wanted (ModelRunner::hidden()).
  int32_t num_hidden_rows = 0;
  bool collect_attention = false;  // its KV policy needs the attention weights
  bool collect_entropy = false;    // its KV policy needs each row's entropy
  // [group] what its block table did since it was last scheduled (all of it
  // the first time): the runner keeps the tables (BlockTableMirror).
  std::vector<BlockTableChange> table_changes;

  // Prompt position of new token i.
  int32_t row_position(int32_t i) const { return num_computed + (row_offsets.empty() ? i : row_offsets[i]); }
  // Tokens the request's computed count moves by once the step ran (accepted
  // proposals aside).
  int32_t num_advanced() const {
    return row_offsets.empty() ? static_cast<int32_t>(new_tokens.size()) - num_spec_tokens : num_covered;
  }
};

// What a step observed for one sequence's KV policy (ModelRunner fills it).
struct SeqKvStats {
  // [new tokens][slot_begin + new tokens]: query row r's attention to each
  // slot, averaged over heads and layers. Empty unless collect_attention.
  std::vector<float> attention;
  // [new tokens] predictive entropy of each row with logits (NaN elsewhere).
  // Empty unless collect_entropy.
  std::vector<float> entropy;
  // A probe step (SchedulerOutput::probe_layers): [new tokens] each row's
  // KV deviation (kv/kv_chunks.h).
  std::vector<float> deviation;
};

struct SchedulerOutput {
  // KV byte work (evictions of the previous step) to run before this step's
  // forward pass, in order.
  KvOps kv_ops;
  std::vector<ScheduledSeq> seqs;       // running requests first, then newly admitted
  int32_t num_tokens = 0;               // sum of new_tokens sizes, <= the budget
  std::vector<RequestId> preempted;     // preempted during this schedule() call
  // Requests whose blocks were freed (finished, aborted, preempted) since the
  // last output: the runner forgets their tables. Before `seqs` in effect.
  std::vector<RequestId> released_tables;
  // > 0: a KV chunks probe step: every seq is a blend's probe, and the pass
  // runs only layers [0, probe_layers) (ForwardBatch::num_layers).
  int32_t probe_layers = 0;
  bool empty() const { return seqs.empty() && kv_ops.empty() && released_tables.empty(); }
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig config, KvCacheConfig kv_config);

  // Queues a request. Throws Error(kOutOfRange) if its prompt can never run
  // (longer than max_model_len - 1, or more blocks than the whole pool), and
  // Error(kInvalidArgument) for an empty prompt. Clamps max_tokens so that
  // prompt + output fits max_model_len.
  void add_request(std::unique_ptr<Request> request);

  SchedulerOutput schedule();

  // After the forward pass of `out`: advances num_computed_tokens, appends
  // `sampled` (one token per seq with sample == true, in order; a seq with
  // proposals takes num_sampled[its index among the sampling seqs] tokens:
  // its accepted proposals, then the token sampled after them), publishes
  // full blocks to the prefix cache, feeds `kv_stats` (one per seq, or
  // empty) to KV policies, which may evict, and applies stop conditions.
  // Rejected proposals' slots are rolled back (KvCacheManager::rollback);
  // tokens after one that ends the request are dropped.
  // Returns the requests that finished (their blocks already released).
  // num_sampled empty: one token per sampling seq.
  std::vector<std::unique_ptr<Request>> update(const SchedulerOutput& out, std::span<const int32_t> sampled,
                                               std::span<const SeqKvStats> kv_stats = {},
                                               std::span<const int32_t> num_sampled = {});

  // Ends a request now (cancel, disconnect, stop string). Returns it, or
  // nullptr if unknown or already finished.
  std::unique_ptr<Request> finish(RequestId id, FinishReason reason);

  const Request* find(RequestId id) const;
  // Speculative decoding: proposals for a request's next decode step
  // (Request::draft_tokens); ignored for an unknown request.
  void set_draft(RequestId id, std::vector<int32_t> tokens);
  bool has_unfinished() const { return !waiting_.empty() || !running_.empty(); }
  int32_t num_waiting() const { return static_cast<int32_t>(waiting_.size()); }
  int32_t num_running() const { return static_cast<int32_t>(running_.size()); }
  int64_t num_preemptions() const { return num_preemptions_; }
  // Tokens every unfinished request still has to compute before it samples
  // (a prompt's rest; 1 for a decode): the backlog a router weighs.
  int64_t num_pending_tokens() const;
  const KvCacheManager& kv() const { return kv_; }
  // The engine thread's access for KV tiers (published blocks, imports).
  KvCacheManager& kv_manager() { return kv_; }
  const SchedulerConfig& config() const { return config_; }

 private:
  class PromptBlocksInFlight;  // scheduler.cpp: shared prefixes computed this step
  // schedule()'s two passes over `budget` tokens: the running requests
  // (oldest first: decodes and unfinished prompt chunks; true if one was
  // preempted), then the waiting ones in FIFO order.
  bool schedule_running(SchedulerOutput& out, int32_t& budget);
  void schedule_waiting(SchedulerOutput& out, int32_t& budget);
  // scheduler_blend.cpp (KV chunks). A step of the blends that are probing,
  // if any (true: `out` is that step, nothing else runs in it).
  bool schedule_probes(SchedulerOutput& out);
  // A waiting request with chunks: admitted with its blend (true), or the
  // pool is short (false: nothing changed).
  bool admit_blend(Request& r, const PrefixHit& hit, SchedulerOutput& out, int32_t& budget);
  // The next step of a blend past its probe: its computed positions from
  // num_computed_tokens, within `budget`.
  ScheduledSeq make_blend_seq(const Request& r, int32_t budget);
  void update_probes(const SchedulerOutput& out, std::span<const SeqKvStats> kv_stats);
  bool blends(const Request& r) const;
  // Which of a seq's new tokens want prompt logits (Request::prompt_logits).
  void set_prompt_logits(const Request& r, ScheduledSeq& s) const;
  struct AllocateResult {
    bool fits = true;        // r got its blocks (false: r itself was preempted)
    bool preempted = false;  // some request was preempted for them
  };
  // num_new slots for running request r, preempting the newest running
  // requests (r last) until they fit; victims are listed in out.preempted.
  AllocateResult allocate_or_preempt(Request& r, int32_t num_new, SchedulerOutput& out);
  // A waiting request becomes running with its prefix hit computed.
  void admit_running(Request& r, int32_t num_hit_tokens);
  ScheduledSeq make_seq(const Request& r, int32_t num_new, std::span<const int32_t> drafts = {});
  // How many of r's proposals a decode step may verify within `budget`.
  int32_t num_drafts_allowed(const Request& r, int32_t budget) const;
  // Appends one seq's sampled tokens (stopping at one that ends it) and
  // advances its computed count; true if it finished.
  bool commit_sampled(Request& r, const ScheduledSeq& s, std::span<const int32_t> tokens);
  void free_blocks(RequestId id);
  void observe(const ScheduledSeq& s, const SeqKvStats& stats);
  bool at_length_limit(const Request& r) const;
  void preempt(Request& r);
  std::unique_ptr<Request> remove(RequestId id);

  SchedulerConfig config_;
  KvCacheManager kv_;
  std::unordered_map<RequestId, std::unique_ptr<Request>> requests_;  // all unfinished
  std::deque<Request*> waiting_;   // FIFO; preempted requests go to the front
  std::vector<Request*> running_;  // admission order
  int64_t num_preemptions_ = 0;
  std::vector<RequestId> released_tables_;  // for the next SchedulerOutput
};

}  // namespace kvlm
