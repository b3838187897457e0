// A request as the scheduler sees it: token ids and how many of them are in
// the KV cache. One rule drives everything (vLLM v1): num_computed_tokens
// catches up with num_tokens() under a per-step token budget. A long prompt
// takes several steps (chunked prefill), a prefix hit starts it ahead, a
// preemption sets it back to 0, and each sampled token adds one to catch up.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "common/strong_id.h"
#include "kv/kv_chunks.h"
#include "kv/kv_policy.h"

namespace kvlm {

struct LoraAdapter;  // model/lora.h: opaque here, the runner applies it

enum class RequestStatus { kWaiting, kRunning, kFinished };

enum class FinishReason {
  kStop,     // an end-of-generation token or a stop string
  kLength,   // max_tokens or the context length reached
  kAborted,  // cancelled by the caller or the client went away
};
std::string_view finish_reason_name(FinishReason r);  // "stop", "length", "abort"

// An embedding request's pooling of the prompt's final hidden states
// (after the model's last norm): their mean, or the last token's.
enum class Pooling : uint8_t { kNone, kMean, kLast };

struct Request {
  RequestId id;
  std::vector<int32_t> tokens;       // prompt, then generated tokens
  int32_t num_prompt_tokens = 0;
  int32_t num_computed_tokens = 0;   // tokens whose K/V are in the cache
  int32_t num_cached_tokens = 0;     // prompt tokens served by the prefix cache at first admission
  int32_t max_tokens = 16;           // generated tokens allowed
  std::vector<int32_t> stop_token_ids;  // generation ends after sampling one of these
  uint64_t cache_salt = 0;           // separates prefix-cache namespaces (0: shared)
  // The LoRA adapter it runs with (null: the base); the engine owns it, and
  // cache_salt already keeps its blocks apart.
  const LoraAdapter* lora = nullptr;
  // Logits are wanted for every prompt position (prompt log-probabilities):
  // the prompt is computed in full, never served by the prefix cache.
  bool prompt_logits = false;
  // With prompt_logits: only positions from this one on are wanted, so the
  // prompt before it may come from the prefix cache and KV chunks.
  int32_t prompt_logits_from = 0;
  // An embedding request: the final hidden states its pooling needs are
  // wanted (ScheduledSeq::num_hidden_rows). Mean pooling needs every prompt
  // position, so its prompt is computed in full as prompt_logits' is.
  Pooling pooling = Pooling::kNone;
  // KV budget and eviction policy (disabled: unbounded). With a budget the
  // request's slots are its resident tokens, not its positions.
  KvBudget kv_budget;
  double arrival_s = 0;              // clock time of submission
  RequestStatus status = RequestStatus::kWaiting;
  std::optional<FinishReason> finish_reason;
  int32_t num_preemptions = 0;
  bool admitted_once = false;
  // Steps it waited for another request to finish computing its next prompt
  // block (Scheduler: shared prefixes in flight), so as to take it cached.
  int32_t num_deferrals = 0;
  // Speculative decoding: tokens proposed to follow tokens.back() (set by the
  // engine before schedule()). The next decode step computes them beside the
  // last token and samples a row for each; schedule() clears them. Ignored
  // unless the request is decoding without a KV budget.
  std::vector<int32_t> draft_tokens;
  // KV chunks (kv/kv_chunks.h): spans of the prompt, ascending; the prefix
  // of their chunk prompts (BOS); the share of reused tokens recomputed.
  // Empty: none (or the engine found them unusable).
  std::vector<KvChunk> kv_chunks;
  std::vector<int32_t> kv_chunk_prefix;
  double kv_blend_recompute = 0;
  // [chunk] 1: computed for this request by its companion (not a cache hit).
  std::vector<uint8_t> kv_chunk_fresh;
  // Its blend, from an admission that found chunk blocks cached until its
  // prompt is computed; a preemption drops it (the next admission plans anew).
  std::optional<BlendPlan> blend;
  int32_t num_chunks_looked_up = 0;          // the last blend's, for the stats
  int32_t num_chunks_hit = 0;
  int32_t num_chunk_reused_tokens = 0;
  int32_t num_chunk_recomputed_tokens = 0;
  int32_t num_chunk_cached_tokens = 0;       // reused from chunks cached before it came, not recomputed

  int32_t num_tokens() const { return static_cast<int32_t>(tokens.size()); }
  int32_t num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
  // Never served by the prefix cache or a KV tier: every prompt position's
  // output is wanted.
  bool computes_whole_prompt() const {
    return (prompt_logits && prompt_logits_from == 0) || pooling == Pooling::kMean;
  }
};

}  // namespace kvlm
