#include "router/policy.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/hash.h"
#include "kv/kv_chunks.h"

namespace kvlm::router {

std::optional<Policy> parse_policy(std::string_view name) {
  if (name == "kv-aware") return Policy::kKvAware;
  if (name == "least-load") return Policy::kLeastLoad;
  if (name == "round-robin") return Policy::kRoundRobin;
  if (name == "session") return Policy::kSession;
  return std::nullopt;
}

const char* policy_name(Policy p) {
  switch (p) {
    case Policy::kKvAware: return "kv-aware";
    case Policy::kLeastLoad: return "least-load";
    case Policy::kRoundRobin: return "round-robin";
    case Policy::kSession: return "session";
  }
  return "kv-aware";
}

const std::vector<BlockHash>& PromptInfo::chain(int32_t block_size) {
  auto it = chains_.find(block_size);
  if (it != chains_.end()) return it->second;
  // The blocks a prefix hit can cover: full ones, leaving one token to compute
  // (KvCacheManager::find_prefix).
  const size_t num_blocks = tokens.empty() ? 0 : (tokens.size() - 1) / static_cast<size_t>(block_size);
  const auto covered = std::span<const int32_t>(tokens).first(num_blocks * static_cast<size_t>(block_size));
  return chains_.emplace(block_size, hash_full_blocks(covered, block_size, salt_key)).first->second;
}

const std::vector<BlockHash>& PromptInfo::chunk_chain(size_t i, int32_t block_size) {
  auto it = chunk_chains_.find({i, block_size});
  if (it != chunk_chains_.end()) return it->second;
  const IdSpan& c = chunks[i];
  const auto span = std::span<const int32_t>(tokens).subspan(static_cast<size_t>(c.begin), static_cast<size_t>(c.end - c.begin));
  const std::vector<int32_t> prompt = kv_chunk_prompt(chunk_prefix, span, block_size);
  return chunk_chains_.emplace(std::make_pair(i, block_size),
                               hash_full_blocks(prompt, block_size, kv_chunk_extra_key(salt_key)))
      .first->second;
}

namespace {

// One worker as the cost model sees it.
struct Candidate {
  std::shared_ptr<Worker> worker;
  int32_t cached = 0;  // prompt tokens it would not compute
  int32_t from_tier = 0;
  double cost = 0;
};

// The prompt tokens after its prefix hit (`hit` tokens) that `w` would copy
// from the KV chunks it holds in RAM (KvCacheManager::allocate_blend) and
// not recompute (select_recompute's count of them).
int32_t chunk_tokens_held(const Worker& w, PromptInfo& prompt, int32_t bs, int32_t hit, Clock::time_point now) {
  int32_t n = 0;
  const auto num_prefix = static_cast<int32_t>(prompt.chunk_prefix.size());
  const auto last = static_cast<int32_t>(prompt.tokens.size()) - 1;  // always computed
  for (size_t i = 0; i < prompt.chunks.size(); ++i) {
    const IdSpan& c = prompt.chunks[i];
    if (c.begin < hit) continue;
    const int32_t blocks = w.kv.num_leading(prompt.chunk_chain(i, bs), now);
    n += std::max(0, std::min(c.begin + blocks * bs - num_prefix, last) - c.begin);
  }
  const double share = std::clamp(prompt.blend_recompute, 0.0, 1.0);
  return n - static_cast<int32_t>(std::ceil(share * n - 1e-9));
}

// The prompt's blocks `w` holds in RAM and, after them, in its shared tier.
void count_cached(Candidate& c, PromptInfo& prompt, WorkerSet& set, Clock::time_point now) {
  if (prompt.tokens.empty()) return;
  const Worker& w = *c.worker;
  const int32_t bs = w.block_size > 0 ? w.block_size : kDefaultBlockSize;
  const std::vector<BlockHash>& chain = prompt.chain(bs);
  const int32_t ram = w.kv.num_leading(chain, now);
  const int32_t tier = w.shared_tier ? set.shared_tier().num_following(*w.shared_tier, chain, ram, now) : 0;
  c.cached = (ram + tier) * bs;
  c.from_tier = tier * bs;
  c.cached += chunk_tokens_held(w, prompt, bs, c.cached, now);
}

// Tokens the worker has to compute before ours: what it reports, or what we
// sent it and have not seen start, whichever is more (our latest requests
// may not be in its last report yet).
double backlog(const Worker& w, const PolicyWeights& weights) {
  const double tokens = static_cast<double>(std::max(w.load.num_pending_tokens, w.num_outstanding_tokens));
  return weights.load_weight * tokens + weights.in_flight_cost * w.num_in_flight;
}

size_t pick_min_cost(const std::vector<Candidate>& c, uint64_t& round_robin) {
  // Equal costs (an idle fleet): take turns, so they still spread.
  const size_t start = static_cast<size_t>(round_robin++ % c.size());
  size_t best = start;
  for (size_t k = 1; k < c.size(); ++k) {
    const size_t i = (start + k) % c.size();
    if (c[i].cost < c[best].cost) best = i;
  }
  return best;
}

size_t pick_session(const std::vector<Candidate>& c, const std::string& key) {
  size_t best = 0;
  uint64_t best_score = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    const std::string s = key + '\n' + c[i].worker->url();
    const uint64_t score = hash128(s.data(), s.size()).lo;
    if (i == 0 || score > best_score) {
      best = i;
      best_score = score;
    }
  }
  return best;
}

}  // namespace

std::optional<Decision> choose(Policy policy, const PolicyWeights& weights, PromptInfo& prompt,
                               const std::vector<std::shared_ptr<Worker>>& workers,
                               const std::set<std::string>& exclude, WorkerSet& set, uint64_t& round_robin) {
  const auto now = Clock::now();
  std::vector<Candidate> candidates;
  for (const auto& w : workers)
    if (set.routable(*w, now) && !exclude.count(w->url())) candidates.push_back({w});
  if (candidates.empty()) return std::nullopt;
  for (Candidate& c : candidates) {
    count_cached(c, prompt, set, now);
    const double uncached = static_cast<double>(prompt.tokens.size()) - c.cached;
    c.cost = backlog(*c.worker, weights);
    if (policy == Policy::kKvAware) c.cost += uncached + weights.tier_cost * c.from_tier;
  }
  size_t i = 0;
  const char* reason = policy_name(policy);
  switch (policy) {
    case Policy::kKvAware:
      i = pick_min_cost(candidates, round_robin);
      reason = candidates[i].cached > 0 ? "prefix" : "load";
      break;
    case Policy::kLeastLoad: i = pick_min_cost(candidates, round_robin); break;
    case Policy::kSession:
      if (!prompt.session.empty()) {
        i = pick_session(candidates, prompt.session);
        break;
      }
      [[fallthrough]];
    case Policy::kRoundRobin: i = static_cast<size_t>(round_robin++ % candidates.size()); break;
  }
  Decision d;
  d.worker = candidates[i].worker;
  d.reason = reason;
  if (!prompt.tokens.empty()) {
    d.predicted_cached = candidates[i].cached;
    d.predicted_uncached = static_cast<int64_t>(prompt.tokens.size()) - candidates[i].cached;
  }
  return d;
}

}  // namespace kvlm::router
