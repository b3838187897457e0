#include "sched/scheduler.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "common/assert.h"
#include "common/error.h"

namespace kvlm {

namespace {

SchedulerConfig validated(SchedulerConfig c) {
  if (c.max_num_batched_tokens <= 0) {
    throw_error(ErrorCode::kInvalidArgument, "max_num_batched_tokens must be positive, got {}",
                c.max_num_batched_tokens);
  }
  if (c.max_num_seqs <= 0) {
    throw_error(ErrorCode::kInvalidArgument, "max_num_seqs must be positive, got {}",
                c.max_num_seqs);
  }
  if (c.max_model_len < 2) {
    throw_error(ErrorCode::kInvalidArgument,
                "max_model_len must leave room for a prompt and one token, got {}",
                c.max_model_len);
  }
  return c;
}

// Slots a request of num_tokens tokens holds at most: a budgeted one never
// more than its (validated) budget and one block.
int32_t resident_limit(const Request& r, int32_t num_tokens, int32_t block_size) {
  if (!r.kv_budget.enabled()) return num_tokens;
  return std::min(num_tokens, r.kv_budget.budget_tokens + block_size);
}

// Steps a waiting request may wait for a shared prefix in flight: a bound,
// so a request whose twin never caches its blocks (a budget, a full pool)
// still runs.
constexpr int32_t kMaxDeferrals = 64;

}  // namespace

// The prompt blocks a step computes in full, by hash (a small set: built
// only when a waiting request asks).
class Scheduler::PromptBlocksInFlight {
 public:
  explicit PromptBlocksInFlight(const KvCacheManager& kv) : kv_(kv) {}
  // `r` computes tokens [computed, computed + num_new) this step, where
  // computed is its num_computed_tokens or, newly admitted, its hit.
  void add(const Request& r, int32_t num_new, std::optional<int32_t> computed = std::nullopt) {
    // A budget may publish nothing; a blend publishes nothing past its first copied slot.
    if (!kv_.prefix_caching() || r.computes_whole_prompt() || r.kv_budget.enabled() || r.blend) return;
    const int32_t bs = kv_.block_size();
    const int32_t from = computed.value_or(r.num_computed_tokens);
    const int32_t first = from / bs, end = std::min(from + num_new, r.num_prompt_tokens) / bs;
    if (end <= first) return;
    const std::vector<BlockHash> hashes =
        hash_full_blocks(std::span<const int32_t>(r.tokens).first(static_cast<size_t>(end) * bs), bs, r.cache_salt);
    for (int32_t i = first; i < end; ++i) blocks_.insert(hashes[static_cast<size_t>(i)]);
  }
  // Whether the first block `r` would compute after `hit` is one of them.
  bool computes_next_block(const Request& r, const PrefixHit& hit) const {
    if (blocks_.empty() || r.computes_whole_prompt()) return false;
    const int32_t bs = kv_.block_size();
    const int32_t n = hit.num_tokens / bs;
    if ((n + 1) * bs > r.num_tokens() - 1) return false;  // no full block left that a hit could cover
    const auto block = std::span<const int32_t>(r.tokens).subspan(static_cast<size_t>(n) * bs, bs);
    const std::optional<BlockHash> parent = hit.hashes.empty() ? std::nullopt : std::optional(hit.hashes.back());
    return blocks_.count(hash_block(parent, block, r.cache_salt)) > 0;
  }

 private:
  const KvCacheManager& kv_;
  std::unordered_set<BlockHash> blocks_;
};

Scheduler::Scheduler(SchedulerConfig config, KvCacheConfig kv_config)
    : config_(validated(config)), kv_(std::move(kv_config)) {}

void Scheduler::add_request(std::unique_ptr<Request> request) {
  KVLM_ASSERT(request != nullptr, "add_request(nullptr)");
  KVLM_ASSERT(requests_.count(request->id) == 0, "request id added twice");
  Request& r = *request;
  const int32_t num_prompt = r.num_tokens();
  if (num_prompt == 0) {
    throw_error(ErrorCode::kInvalidArgument, "the prompt is empty; send at least one token");
  }
  if (r.kv_budget.enabled()) {
    if (kv_.num_groups() != 1)
      throw_error(ErrorCode::kInvalidArgument,
                  "KV budgets need a model whose layers share one KV cache; this one has sliding-window layers");
    r.kv_budget = validated_budget(r.kv_budget, kv_.block_size());
  }
  // With --kv-shift positions stay inside the budget, so neither the prompt
  // nor the generation is bounded by the context length.
  const bool unbounded_positions = r.kv_budget.enabled() && r.kv_budget.shift;
  if (num_prompt > config_.max_model_len - 1 && !unbounded_positions) {
    throw_error(ErrorCode::kOutOfRange,
                "the prompt has {} tokens but the context length is {}: at most {} prompt tokens "
                "leave room to generate; shorten the prompt (or run under a KV budget with kv_shift)",
                num_prompt, config_.max_model_len, config_.max_model_len - 1);
  }
  // The prompt and its first generated token must fit the pool on their own,
  // or the request could never run even with every other request preempted.
  const int32_t num_blocks_needed = kv_.num_blocks_for(resident_limit(r, num_prompt + 1, kv_.block_size()));
  if (num_blocks_needed > kv_.pool().num_blocks()) {
    throw_error(ErrorCode::kOutOfRange,
                "the prompt has {} tokens and needs {} KV blocks of {} tokens, but the KV cache "
                "holds only {} blocks; shorten the prompt or give the KV cache more memory",
                num_prompt, num_blocks_needed, kv_.block_size(), kv_.pool().num_blocks());
  }
  if (r.max_tokens < 1) {
    throw_error(ErrorCode::kInvalidArgument, "max_tokens must be at least 1, got {}",
                r.max_tokens);
  }
  KVLM_ASSERT(r.num_prompt_tokens == 0 || r.num_prompt_tokens == num_prompt,
              "num_prompt_tokens disagrees with the tokens of a new request");
  r.num_prompt_tokens = num_prompt;
  if (!unbounded_positions) r.max_tokens = std::min(r.max_tokens, config_.max_model_len - num_prompt);
  r.num_computed_tokens = 0;
  r.status = RequestStatus::kWaiting;
  r.finish_reason.reset();
  waiting_.push_back(&r);
  requests_.emplace(r.id, std::move(request));
}

ScheduledSeq Scheduler::make_seq(const Request& r, int32_t num_new, std::span<const int32_t> drafts) {
  ScheduledSeq s;
  s.id = r.id;
  s.lora = r.lora;
  s.num_computed = r.num_computed_tokens;
  auto first = r.tokens.begin() + r.num_computed_tokens;
  s.new_tokens.assign(first, first + num_new);
  s.new_tokens.insert(s.new_tokens.end(), drafts.begin(), drafts.end());
  s.num_spec_tokens = static_cast<int32_t>(drafts.size());
  s.sample = r.num_computed_tokens + num_new == r.num_tokens();
  s.slot_begin = kv_.num_resident(r.id);
  s.position_begin = r.kv_budget.enabled() && r.kv_budget.shift ? s.slot_begin : r.num_computed_tokens;
  set_prompt_logits(r, s);
  if (r.kv_budget.enabled()) {
    s.collect_attention = kv_policy_needs_attention(r.kv_budget.policy);
    s.collect_entropy = kv_policy_needs_entropy(r.kv_budget.policy);
    if (s.collect_entropy) s.num_prompt_logits = num_new - (s.sample ? 1 : 0);
  }
  // Every new token is a prompt token until the prompt is done (the sampling
  // step of the last one included).
  if (r.pooling == Pooling::kMean && r.num_computed_tokens < r.num_prompt_tokens)
    s.num_hidden_rows = std::min(num_new, r.num_prompt_tokens - r.num_computed_tokens);
  if (r.pooling == Pooling::kLast && r.num_computed_tokens + num_new == r.num_prompt_tokens) s.num_hidden_rows = 1;
  for (int32_t g = 0; g < kv_.num_groups(); ++g) s.table_changes.push_back(kv_.take_table_change(r.id, g));
  return s;
}

void Scheduler::set_prompt_logits(const Request& r, ScheduledSeq& s) const {
  if (!r.prompt_logits) return;
  // Rows at positions [prompt_logits_from, num_prompt - 1): the last prompt
  // position is the sampling row.
  const auto n = static_cast<int32_t>(s.new_tokens.size());
  int32_t first = 0;
  while (first < n && s.row_position(first) < r.prompt_logits_from) ++first;
  int32_t count = 0;
  while (first + count < n && s.row_position(first + count) < r.num_prompt_tokens - 1) ++count;
  s.first_prompt_logit_row = first;
  s.num_prompt_logits = count;
}

void Scheduler::free_blocks(RequestId id) {
  if (!kv_.has_request(id)) return;  // never allocated (a waiting request)
  kv_.free(id);
  released_tables_.push_back(id);
}

void Scheduler::preempt(Request& r) {
  free_blocks(r.id);
  r.num_computed_tokens = 0;
  r.blend.reset();
  r.status = RequestStatus::kWaiting;
  ++r.num_preemptions;
  ++num_preemptions_;
  waiting_.push_front(&r);
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  out.kv_ops = kv_.take_ops();
  if (!schedule_probes(out)) {
    int32_t budget = config_.max_num_batched_tokens;
    const bool preempted = schedule_running(out, budget);
    // After a preemption the pool is known to be short, and admitting would
    // only steal blocks back from the preempted.
    if (!preempted) schedule_waiting(out, budget);
    // The copies of the blends admitted now run before this step's pass.
    for (const KvOp& op : kv_.take_ops()) out.kv_ops.push_back(op);
  }
  out.released_tables.swap(released_tables_);  // this call's preemptions included
  return out;
}

bool Scheduler::schedule_running(SchedulerOutput& out, int32_t& budget) {
  bool preempted = false;
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Request* r = running_[i];
    // A decode with proposals verifies them in the same step, if the pool has
    // room for their slots now; else it decodes alone (no preemption for them).
    const int32_t num_drafts = num_drafts_allowed(*r, budget);
    if (num_drafts > 0 && kv_.allocate(r->id, 1 + num_drafts)) {
      out.seqs.push_back(make_seq(*r, 1, std::span<const int32_t>(r->draft_tokens).first(num_drafts)));
      r->draft_tokens.clear();
      out.num_tokens += 1 + num_drafts;
      budget -= 1 + num_drafts;
      ++i;
      continue;
    }
    r->draft_tokens.clear();
    if (r->blend) {  // its prompt's blocks are all allocated
      out.seqs.push_back(make_blend_seq(*r, budget));
      out.num_tokens += static_cast<int32_t>(out.seqs.back().new_tokens.size());
      budget -= static_cast<int32_t>(out.seqs.back().new_tokens.size());
      ++i;
      continue;
    }
    const int32_t num_new = std::min({r->num_tokens() - r->num_computed_tokens, budget,
                                      kv_.max_new_tokens(r->id, r->kv_budget)});
    KVLM_ASSERT(num_new > 0, "a running request with nothing to compute");
    const AllocateResult result = allocate_or_preempt(*r, num_new, out);
    if (result.preempted) preempted = true;
    if (!result.fits) break;  // r was the last running request: nothing left here
    out.seqs.push_back(make_seq(*r, num_new));
    out.num_tokens += num_new;
    budget -= num_new;
    ++i;
  }
  return preempted;
}

Scheduler::AllocateResult Scheduler::allocate_or_preempt(Request& r, int32_t num_new, SchedulerOutput& out) {
  AllocateResult result;
  while (!kv_.allocate(r.id, num_new)) {
    // The newest request gives way: it has the least work to lose.
    Request* victim = running_.back();
    running_.pop_back();
    preempt(*victim);
    out.preempted.push_back(victim->id);
    result.preempted = true;
    if (victim == &r) {
      result.fits = false;
      break;
    }
  }
  return result;
}

void Scheduler::schedule_waiting(SchedulerOutput& out, int32_t& budget) {
  PromptBlocksInFlight in_flight(kv_);
  for (const ScheduledSeq& s : out.seqs) in_flight.add(*requests_.at(s.id), static_cast<int32_t>(s.new_tokens.size()));
  size_t next = 0;
  while (budget > 0 && next < waiting_.size() && num_running() < config_.max_num_seqs) {
    // A new request always needs a fresh block (a hit leaves its last token
    // to compute): with none free, skip hashing its prompt.
    if (kv_.pool().num_free_blocks() == 0) break;
    Request* r = waiting_[next];
    const int32_t max_hit = std::min(kv_.max_hit_tokens(r->kv_budget), r->prompt_logits ? r->prompt_logits_from : INT32_MAX);
    PrefixHit hit = r->computes_whole_prompt() ? PrefixHit{} : kv_.find_prefix(r->tokens, r->cache_salt, max_hit);
    // Its next block is being computed by a request of this step: wait one
    // step and take it from the prefix cache rather than compute it twice.
    if (r->num_deferrals < kMaxDeferrals && in_flight.computes_next_block(*r, hit)) {
      ++r->num_deferrals;
      ++next;
      continue;
    }
    if (blends(*r)) {
      if (!admit_blend(*r, hit, out, budget)) break;
      waiting_.erase(std::find(waiting_.begin(), waiting_.end(), r));
      continue;
    }
    const int32_t num_new = std::min({r->num_tokens() - hit.num_tokens, budget,
                                      kv_.max_new_tokens(r->id, r->kv_budget, &hit)});
    // Head-of-line blocking is deliberate: skipping a big request for
    // smaller ones behind it could starve it forever.
    if (!kv_.allocate(r->id, num_new, &hit, r->kv_budget)) break;
    waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(next));
    in_flight.add(*r, num_new, hit.num_tokens);
    admit_running(*r, hit.num_tokens);
    out.seqs.push_back(make_seq(*r, num_new));
    out.num_tokens += num_new;
    budget -= num_new;
  }
}

void Scheduler::admit_running(Request& r, int32_t num_hit_tokens) {
  if (!r.admitted_once) {
    r.num_cached_tokens = num_hit_tokens;
    r.admitted_once = true;
  }
  r.num_computed_tokens = num_hit_tokens;
  r.status = RequestStatus::kRunning;
  running_.push_back(&r);
}

std::vector<std::unique_ptr<Request>> Scheduler::update(const SchedulerOutput& out, std::span<const int32_t> sampled,
                                                        std::span<const SeqKvStats> kv_stats,
                                                        std::span<const int32_t> num_sampled) {
  KVLM_ASSERT(kv_stats.empty() || kv_stats.size() == out.seqs.size(), "one KV statistics entry per seq");
  kv_.release_borrowed();  // the step ran the copies that read them
  if (out.probe_layers > 0) {
    update_probes(out, kv_stats);
    return {};
  }
  std::vector<RequestId> finished, must_preempt;
  size_t next_sample = 0, next_count = 0;
  for (size_t i = 0; i < out.seqs.size(); ++i) {
    const ScheduledSeq& s = out.seqs[i];
    std::span<const int32_t> tokens;
    if (s.sample) {
      const size_t n = num_sampled.empty() ? 1 : static_cast<size_t>(num_sampled[next_count++]);
      KVLM_ASSERT(n >= 1 && n <= static_cast<size_t>(1 + s.num_spec_tokens), "sampled tokens beyond the proposals");
      KVLM_ASSERT(next_sample + n <= sampled.size(), "fewer sampled tokens than sampling seqs");
      tokens = sampled.subspan(next_sample, n);
      next_sample += n;
    }
    auto it = requests_.find(s.id);
    // finish() between schedule() and update() (a cancel): nothing to advance.
    if (it == requests_.end()) continue;
    Request& r = *it->second;
    KVLM_ASSERT(r.status == RequestStatus::kRunning, "update for a request that is not running");
    KVLM_ASSERT(r.num_computed_tokens == s.num_computed, "update out of step with schedule");
    r.num_computed_tokens += s.num_advanced();
    if (r.blend && r.num_computed_tokens >= r.num_prompt_tokens) r.blend.reset();  // its prompt is done
    const bool done = commit_sampled(r, s, tokens);
    if (!kv_stats.empty()) observe(s, kv_stats[i]);
    // A policy that cannot copy a shared block for want of a free one: the
    // request replays later and reaches the same state (deterministic).
    if (!kv_.on_computed(r.id, r.tokens, r.num_computed_tokens, r.cache_salt)) must_preempt.push_back(r.id);
    if (s.num_spec_tokens > 0 && !done) kv_.rollback(r.id, r.num_computed_tokens);
    if (done) finished.push_back(r.id);
  }
  KVLM_ASSERT(next_sample == sampled.size(), "more sampled tokens than sampling seqs");

  std::vector<std::unique_ptr<Request>> done;
  done.reserve(finished.size());
  for (RequestId id : finished) done.push_back(remove(id));
  for (RequestId id : must_preempt) {
    auto it = requests_.find(id);
    if (it == requests_.end()) continue;  // finished anyway
    running_.erase(std::find(running_.begin(), running_.end(), it->second.get()));
    preempt(*it->second);
  }
  return done;
}

bool Scheduler::commit_sampled(Request& r, const ScheduledSeq& s, std::span<const int32_t> tokens) {
  for (size_t j = 0; j < tokens.size(); ++j) {
    // tokens[j - 1] was accepted: it is the proposal this step computed next.
    if (j > 0) {
      KVLM_ASSERT(tokens[j - 1] == s.new_tokens[s.new_tokens.size() - s.num_spec_tokens + j - 1],
                  "an accepted token that is not the proposal");
      ++r.num_computed_tokens;
    }
    r.tokens.push_back(tokens[j]);
    const auto& stops = r.stop_token_ids;
    if (std::find(stops.begin(), stops.end(), tokens[j]) != stops.end()) {
      r.finish_reason = FinishReason::kStop;
    } else if (r.num_output_tokens() >= r.max_tokens || at_length_limit(r)) {
      r.finish_reason = FinishReason::kLength;
    }
    if (r.finish_reason) return true;
  }
  return false;
}

int32_t Scheduler::num_drafts_allowed(const Request& r, int32_t budget) const {
  if (r.draft_tokens.empty() || r.kv_budget.enabled() || r.num_tokens() - r.num_computed_tokens != 1) return 0;
  // Room for the proposals and the token sampled after them: the step
  // budget, max_tokens and the context length.
  const int32_t n = std::min({static_cast<int32_t>(r.draft_tokens.size()), budget - 1,
                              r.max_tokens - r.num_output_tokens() - 1, config_.max_model_len - r.num_tokens() - 1});
  return std::max(n, 0);
}

void Scheduler::observe(const ScheduledSeq& s, const SeqKvStats& stats) {
  const auto n = static_cast<int32_t>(s.new_tokens.size());
  if (!stats.attention.empty()) {
    kv_.observe_attention(s.id, s.slot_begin, s.num_computed, n, s.slot_begin + n, stats.attention);
    kv_.observe_tokens(s.id, s.slot_begin, s.new_tokens);  // the learned policy's token features
  }
  for (int32_t i = 0; i < static_cast<int32_t>(stats.entropy.size()); ++i)
    if (!std::isnan(stats.entropy[i])) kv_.observe_entropy(s.id, s.slot_begin + i, stats.entropy[i]);
}

bool Scheduler::at_length_limit(const Request& r) const {
  const bool unbounded_positions = r.kv_budget.enabled() && r.kv_budget.shift;
  if (!unbounded_positions && r.num_tokens() >= config_.max_model_len) return true;
  // The next step would need one slot more than the whole pool: the pool,
  // not the model, limits this request's context.
  return kv_.num_blocks_for(resident_limit(r, r.num_tokens(), kv_.block_size())) > kv_.pool().num_blocks();
}

std::unique_ptr<Request> Scheduler::finish(RequestId id, FinishReason reason) {
  if (requests_.count(id) == 0) return nullptr;
  std::unique_ptr<Request> r = remove(id);
  r->finish_reason = reason;
  return r;
}

const Request* Scheduler::find(RequestId id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second.get();
}

void Scheduler::set_draft(RequestId id, std::vector<int32_t> tokens) {
  auto it = requests_.find(id);
  if (it != requests_.end()) it->second->draft_tokens = std::move(tokens);
}

std::unique_ptr<Request> Scheduler::remove(RequestId id) {
  auto it = requests_.find(id);
  KVLM_ASSERT(it != requests_.end(), "removing an unknown request");
  std::unique_ptr<Request> r = std::move(it->second);
  requests_.erase(it);
  if (r->status == RequestStatus::kRunning) {
    running_.erase(std::find(running_.begin(), running_.end(), r.get()));
  } else {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), r.get()));
  }
  free_blocks(id);
  r->status = RequestStatus::kFinished;
  return r;
}

int64_t Scheduler::num_pending_tokens() const {
  int64_t n = 0;
  for (const auto& [id, r] : requests_) n += r->num_tokens() - r->num_computed_tokens;
  return n;
}

}  // namespace kvlm
