// The scheduler's part of KV chunks (kv/kv_chunks.h): a request whose prompt
// holds cached chunks is admitted with its whole prompt allocated and the
// chunks' KV copied in; a probe step then measures each copied token's KV
// deviation on an early layer, the most deviating share is chosen, and the
// prompt's remaining computed positions run like a chunked prefill that
// skips the copied ones.
#include <algorithm>

#include "common/assert.h"
#include "sched/scheduler.h"

namespace kvlm {

bool Scheduler::blends(const Request& r) const {
  return !r.kv_chunks.empty() && !r.kv_budget.enabled() && !r.computes_whole_prompt() && kv_.prefix_caching() &&
         kv_.num_groups() == 1;
}

bool Scheduler::admit_blend(Request& r, const PrefixHit& hit, SchedulerOutput& out, int32_t& budget) {
  std::optional<BlendPlan> plan =
      kv_.allocate_blend(r.id, r.tokens, hit, r.kv_chunks, r.kv_chunk_prefix, r.cache_salt, r.kv_chunk_fresh);
  if (!plan) return false;
  admit_running(r, hit.num_tokens);
  r.num_chunks_looked_up = plan->num_chunks;
  r.num_chunks_hit = plan->num_chunks_hit;
  r.num_chunk_reused_tokens = plan->num_reused;
  r.num_chunk_recomputed_tokens = 0;
  r.num_chunk_cached_tokens = plan->num_cached_not_recomputed();
  r.blend = std::move(plan);
  // With nothing cached it is a plain prefill (its whole prompt allocated).
  if (r.blend->num_reused > 0) {
    const double share = r.kv_blend_recompute;
    // The probe decides which tokens to recompute; with none or all of them
    // there is nothing to decide.
    if (share > 0 && share < 1) {
      r.blend->probe_next = r.blend->begin;
      return true;  // the probe is its next step
    }
    select_recompute(*r.blend, share);
    r.num_chunk_recomputed_tokens = r.blend->num_recomputed;
    r.num_chunk_cached_tokens = r.blend->num_cached_not_recomputed();
  }
  out.seqs.push_back(make_blend_seq(r, budget));
  out.num_tokens += static_cast<int32_t>(out.seqs.back().new_tokens.size());
  budget -= static_cast<int32_t>(out.seqs.back().new_tokens.size());
  return true;
}

ScheduledSeq Scheduler::make_blend_seq(const Request& r, int32_t budget) {
  const BlendPlan& plan = *r.blend;
  KVLM_ASSERT(!plan.probing() && budget > 0, "a blend step while probing or without budget");
  ScheduledSeq s;
  s.id = r.id;
  s.lora = r.lora;
  s.num_computed = r.num_computed_tokens;
  s.slot_begin = s.position_begin = r.num_computed_tokens;
  int32_t pos = r.num_computed_tokens;
  for (; pos < r.num_prompt_tokens && static_cast<int32_t>(s.new_tokens.size()) < budget; ++pos) {
    if (!plan.computes(pos)) continue;
    s.new_tokens.push_back(r.tokens[static_cast<size_t>(pos)]);
    s.row_offsets.push_back(pos - r.num_computed_tokens);
  }
  // The last prompt position is always computed, so the rows end at a computed one.
  KVLM_ASSERT(!s.row_offsets.empty(), "a blend step with nothing to compute");
  s.num_covered = s.row_offsets.back() + 1;
  s.sample = r.num_computed_tokens + s.num_covered == r.num_tokens();
  set_prompt_logits(r, s);
  if (r.pooling == Pooling::kLast && s.sample) s.num_hidden_rows = 1;
  for (int32_t g = 0; g < kv_.num_groups(); ++g) s.table_changes.push_back(kv_.take_table_change(r.id, g));
  return s;
}

bool Scheduler::schedule_probes(SchedulerOutput& out) {
  int32_t budget = config_.max_num_batched_tokens;
  for (Request* r : running_) {
    if (!r->blend || !r->blend->probing() || budget <= 0) continue;
    const BlendPlan& plan = *r->blend;
    const int32_t begin = plan.probe_next;
    const int32_t n = std::min(plan.end() - begin, budget);
    ScheduledSeq s;
    s.id = r->id;
    s.lora = r->lora;
    s.num_computed = r->num_computed_tokens;
    s.slot_begin = s.position_begin = begin;
    s.new_tokens.assign(r->tokens.begin() + begin, r->tokens.begin() + begin + n);
    for (int32_t g = 0; g < kv_.num_groups(); ++g) s.table_changes.push_back(kv_.take_table_change(r->id, g));
    out.seqs.push_back(std::move(s));
    out.num_tokens += n;
    budget -= n;
  }
  if (out.seqs.empty()) return false;
  out.probe_layers = config_.kv_blend_probe_layer + 1;
  return true;
}

void Scheduler::update_probes(const SchedulerOutput& out, std::span<const SeqKvStats> kv_stats) {
  for (size_t i = 0; i < out.seqs.size(); ++i) {
    const ScheduledSeq& s = out.seqs[i];
    auto it = requests_.find(s.id);
    // Finished meanwhile (a cancel), or preempted and planned anew.
    if (it == requests_.end() || !it->second->blend || it->second->blend->probe_next != s.slot_begin) continue;
    Request& r = *it->second;
    BlendPlan& plan = *r.blend;
    const auto n = static_cast<int32_t>(s.new_tokens.size());
    KVLM_ASSERT(kv_stats.size() == out.seqs.size() && static_cast<int32_t>(kv_stats[i].deviation.size()) == n,
                "a probe step without a deviation per row");
    for (int32_t k = 0; k < n; ++k)
      plan.deviation[static_cast<size_t>(s.slot_begin + k - plan.begin)] = kv_stats[i].deviation[static_cast<size_t>(k)];
    plan.probe_next += n;
    if (plan.probe_next < plan.end()) continue;
    plan.probe_next = -1;
    select_recompute(plan, r.kv_blend_recompute);
    r.num_chunk_recomputed_tokens = plan.num_recomputed;
    r.num_chunk_cached_tokens = plan.num_cached_not_recomputed();
  }
}

}  // namespace kvlm
