// Which worker takes a request (docs/router.md "Routing"):
//
//   kv-aware     the cheapest: cost = uncached prompt tokens
//                               + tier_cost x tokens it would load from the shared tier
//                               + load_weight x backlog
//                where the uncached tokens come from the KV blocks the worker
//                holds (its KV events) and the blocks of the shared tier, and
//                the backlog is the tokens it must compute first (its reports,
//                or the router's own requests there if more), plus
//                in_flight_cost per request of ours in flight on it.
//   least-load   the smallest backlog (as above, without the cache).
//   round-robin  each worker in turn.
//   session      the worker a session key hashes to (rendezvous hashing, so
//                a worker's leaving moves only its own sessions); without a
//                key, round-robin.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "kv/block_hash.h"
#include "tokenizer/prompt_pieces.h"
#include "router/workers.h"

namespace kvlm::router {

enum class Policy { kKvAware, kLeastLoad, kRoundRobin, kSession };
// A worker that has not said its block size yet is taken to have kvlm's default.
inline constexpr int32_t kDefaultBlockSize = 16;
std::optional<Policy> parse_policy(std::string_view name);
const char* policy_name(Policy p);

struct PolicyWeights {
  double load_weight = 0.5;     // a backlog token costs half of one of our own to compute (docs/router.md)
  double tier_cost = 0.1;       // a token loaded from the shared tier, against computing it (measured 0.04-0.06)
  double in_flight_cost = 8.0;  // tokens charged per request of ours in flight (a tie-breaker)
};

// What the router knows of a request before sending it.
struct PromptInfo {
  std::vector<int32_t> tokens;  // the prompt as the worker will tokenize it; empty: unknown
  // Its KV chunks (docs/kv-chunks.md) over `tokens`, and the prefix of a
  // chunk's standalone prompt (BOS): a worker holding a chunk's blocks
  // copies them instead of computing them.
  std::vector<IdSpan> chunks;
  std::vector<int32_t> chunk_prefix;
  // The share of copied chunk tokens the worker recomputes: the body's
  // kv_blend_recompute, else the engine's default.
  double blend_recompute = 0.15;
  uint64_t salt_key = 0;        // cache_salt's extra key (0: none)
  std::string session;          // the session policy's key; empty: none
  // The body's `model`: a LoRA adapter's name when a worker serves one of
  // that name, whose blocks are then hashed with the adapter's key.
  std::string model;
  bool adapter_resolved = false;  // dispatch() looked the model up (once)
  // The prompt's full block hashes for a block size (computed once each).
  const std::vector<BlockHash>& chain(int32_t block_size);
  // The block hashes of chunk i's standalone prompt (computed once each).
  const std::vector<BlockHash>& chunk_chain(size_t i, int32_t block_size);

 private:
  std::map<int32_t, std::vector<BlockHash>> chains_;
  std::map<std::pair<size_t, int32_t>, std::vector<BlockHash>> chunk_chains_;
};

struct Decision {
  std::shared_ptr<Worker> worker;
  // Prompt tokens the worker should report as cached (its RAM blocks and
  // the shared tier's); nullopt when the prompt is unknown.
  std::optional<int32_t> predicted_cached;
  int64_t predicted_uncached = 0;  // tokens it will compute (0 when unknown)
  const char* reason = "";         // kv-aware: "prefix" (a hit won) or "load"; else the policy
};

// Chooses among the routable workers of `workers` not in `exclude`;
// nullopt when there is none. Call with WorkerSet::mu() held.
std::optional<Decision> choose(Policy policy, const PolicyWeights& weights, PromptInfo& prompt,
                               const std::vector<std::shared_ptr<Worker>>& workers,
                               const std::set<std::string>& exclude, WorkerSet& set, uint64_t& round_robin);

}  // namespace kvlm::router
