#include "sched/scheduler.h"

#include <algorithm>
#include <cmath>

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

}  // namespace

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

ScheduledSeq Scheduler::make_seq(const Request& r, int32_t num_new) {
  ScheduledSeq s;
  s.id = r.id;
  s.num_computed = r.num_computed_tokens;
  auto first = r.tokens.begin() + r.num_computed_tokens;
  s.new_tokens.assign(first, first + num_new);
  s.sample = r.num_computed_tokens + num_new == r.num_tokens();
  s.slot_begin = kv_.num_resident(r.id);
  s.position_begin = r.kv_budget.enabled() && r.kv_budget.shift ? s.slot_begin : r.num_computed_tokens;
  if (r.prompt_logits)
    s.num_prompt_logits = std::clamp(r.num_prompt_tokens - 1 - r.num_computed_tokens, 0, num_new);
  if (r.kv_budget.enabled()) {
    s.collect_attention = kv_policy_needs_attention(r.kv_budget.policy);
    s.collect_entropy = kv_policy_needs_entropy(r.kv_budget.policy);
    if (s.collect_entropy) s.num_prompt_logits = num_new - (s.sample ? 1 : 0);
  }
  for (int32_t g = 0; g < kv_.num_groups(); ++g) s.table_changes.push_back(kv_.take_table_change(r.id, g));
  return s;
}

void Scheduler::free_blocks(RequestId id) {
  if (!kv_.has_request(id)) return;  // never allocated (a waiting request)
  kv_.free(id);
  released_tables_.push_back(id);
}

void Scheduler::preempt(Request& r) {
  free_blocks(r.id);
  r.num_computed_tokens = 0;
  r.status = RequestStatus::kWaiting;
  ++r.num_preemptions;
  ++num_preemptions_;
  waiting_.push_front(&r);
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  out.kv_ops = kv_.take_ops();
  int32_t budget = config_.max_num_batched_tokens;
  bool preempted = false;

  // 1. Running requests, oldest first: decodes and unfinished prompt chunks.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Request* r = running_[i];
    const int32_t num_new = std::min({r->num_tokens() - r->num_computed_tokens, budget,
                                      kv_.max_new_tokens(r->id, r->kv_budget)});
    KVLM_ASSERT(num_new > 0, "a running request with nothing to compute");
    bool fits = true;
    while (!kv_.allocate(r->id, num_new)) {
      // The newest request gives way: it has the least work to lose.
      Request* victim = running_.back();
      running_.pop_back();
      preempt(*victim);
      out.preempted.push_back(victim->id);
      preempted = true;
      if (victim == r) {
        fits = false;
        break;
      }
    }
    if (!fits) break;  // r was the last running request: nothing left here
    out.seqs.push_back(make_seq(*r, num_new));
    out.num_tokens += num_new;
    budget -= num_new;
    ++i;
  }

  // 2. Waiting requests in FIFO order. After a preemption the pool is known to
  // be short, and admitting would only steal blocks back from the preempted.
  while (!preempted && budget > 0 && !waiting_.empty() &&
         num_running() < config_.max_num_seqs) {
    // A new request always needs a fresh block (a hit leaves its last token
    // to compute): with none free, skip hashing its prompt.
    if (kv_.pool().num_free_blocks() == 0) break;
    Request* r = waiting_.front();
    PrefixHit hit = r->prompt_logits ? PrefixHit{}
                                     : kv_.find_prefix(r->tokens, r->cache_salt, kv_.max_hit_tokens(r->kv_budget));
    const int32_t num_new = std::min({r->num_tokens() - hit.num_tokens, budget,
                                      kv_.max_new_tokens(r->id, r->kv_budget, &hit)});
    // Head-of-line blocking is deliberate: skipping a big request for
    // smaller ones behind it could starve it forever.
    if (!kv_.allocate(r->id, num_new, &hit, r->kv_budget)) break;
    waiting_.pop_front();
    if (!r->admitted_once) {
      r->num_cached_tokens = hit.num_tokens;
      r->admitted_once = true;
    }
    r->num_computed_tokens = hit.num_tokens;
    r->status = RequestStatus::kRunning;
    running_.push_back(r);
    out.seqs.push_back(make_seq(*r, num_new));
    out.num_tokens += num_new;
    budget -= num_new;
  }
  out.released_tables.swap(released_tables_);  // this call's preemptions included
  return out;
}

std::vector<std::unique_ptr<Request>> Scheduler::update(const SchedulerOutput& out, std::span<const int32_t> sampled,
                                                        std::span<const SeqKvStats> kv_stats) {
  KVLM_ASSERT(kv_stats.empty() || kv_stats.size() == out.seqs.size(), "one KV statistics entry per seq");
  std::vector<RequestId> finished, must_preempt;
  size_t next_sample = 0;
  for (size_t i = 0; i < out.seqs.size(); ++i) {
    const ScheduledSeq& s = out.seqs[i];
    std::optional<int32_t> token;
    if (s.sample) {
      KVLM_ASSERT(next_sample < sampled.size(), "fewer sampled tokens than sampling seqs");
      token = sampled[next_sample++];
    }
    auto it = requests_.find(s.id);
    // finish() between schedule() and update() (a cancel): nothing to advance.
    if (it == requests_.end()) continue;
    Request& r = *it->second;
    KVLM_ASSERT(r.status == RequestStatus::kRunning, "update for a request that is not running");
    KVLM_ASSERT(r.num_computed_tokens == s.num_computed, "update out of step with schedule");
    r.num_computed_tokens += static_cast<int32_t>(s.new_tokens.size());
    if (token) r.tokens.push_back(*token);
    if (!kv_stats.empty()) observe(s, kv_stats[i]);
    // A policy that cannot copy a shared block for want of a free one: the
    // request replays later and reaches the same state (deterministic).
    if (!kv_.on_computed(r.id, r.tokens, r.num_computed_tokens, r.cache_salt)) must_preempt.push_back(r.id);
    if (!token) continue;

    const auto& stops = r.stop_token_ids;
    if (std::find(stops.begin(), stops.end(), *token) != stops.end()) {
      r.finish_reason = FinishReason::kStop;
    } else if (r.num_output_tokens() >= r.max_tokens || at_length_limit(r)) {
      r.finish_reason = FinishReason::kLength;
    }
    if (r.finish_reason) finished.push_back(r.id);
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

void Scheduler::observe(const ScheduledSeq& s, const SeqKvStats& stats) {
  const auto n = static_cast<int32_t>(s.new_tokens.size());
  if (!stats.attention.empty())
    kv_.observe_attention(s.id, s.slot_begin, s.num_computed, n, s.slot_begin + n, stats.attention);
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

}  // namespace kvlm
