// KV chunks: KV reuse beyond the prefix (CacheBlend, EuroSys '25;
// docs/kv-chunks.md). A request marks spans of its prompt (documents, tool
// results) as chunks. A chunk's KV is computed once as if it stood alone —
// its "chunk prompt" is the model's prompt prefix (BOS) and then the chunk's
// tokens, positions from 0 — and cached in the pool like prefix blocks, under
// kv_chunk_extra_key. A prompt that holds the chunk anywhere copies those
// slots into its own, re-rotating each key by its new position, and then
// recomputes a share of them in its own context: the tokens whose KV deviates
// most from the copy on an early layer (the probe), where the missing
// cross-attention between chunks shows first.
//
// kv/ keeps the plan (which positions are copied, which computed); the
// scheduler walks it, and the runner does the copies (KvOps) and runs the
// probe (ForwardBatch::num_layers).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace kvlm {

// A span [begin, end) of a prompt's tokens marked as a chunk.
struct KvChunk {
  int32_t begin = 0;
  int32_t end = 0;
  bool operator==(const KvChunk&) const = default;
};

// The chunk prompt whose full blocks hold a chunk's standalone KV: `prefix`
// (the model's BOS, or nothing) then the chunk's tokens, cut to whole blocks
// (a partial last block is never cached, so never reused). Empty when not
// even one block is full.
std::vector<int32_t> kv_chunk_prompt(std::span<const int32_t> prefix, std::span<const int32_t> chunk,
                                     int32_t block_size);

// One request's blend, positions [begin, num_prompt) of its prompt.
struct BlendPlan {
  int32_t begin = 0;                 // its prefix hit: positions before are exact cached blocks
  // [num_prompt - begin] KV copied from a chunk's blocks: 1 cached before
  // the request came, 2 computed for it (by its companion); 0: not copied.
  std::vector<uint8_t> reused;
  std::vector<uint8_t> compute;      // [num_prompt - begin] 1: computed in this prompt
  std::vector<float> deviation;      // [num_prompt - begin] the probe's KV deviation (reused positions)
  int32_t num_reused = 0;            // positions copied from chunks
  int32_t num_recomputed = 0;        // ... of which selected for recomputation
  int32_t num_chunks = 0;            // chunks looked up (after the prefix hit)
  int32_t num_chunks_hit = 0;        // ... found with at least one block cached before the request
  int32_t probe_next = -1;           // the next position the probe computes; -1: no probe (or done)

  int32_t end() const { return begin + static_cast<int32_t>(reused.size()); }
  bool is_reused(int32_t pos) const { return reused[static_cast<size_t>(pos - begin)] != 0; }
  bool computes(int32_t pos) const { return compute[static_cast<size_t>(pos - begin)] != 0; }
  bool probing() const { return probe_next >= 0; }
  // Copied positions not recomputed whose chunk was cached before the
  // request came: what it reports as cached.
  int32_t num_cached_not_recomputed() const;
};

// Marks ceil(share * num_reused) reused positions for recomputation: those
// with the largest deviation (the earlier position first among equals).
// share <= 0 marks none, share >= 1 all (the prompt is then computed in
// full: exact).
void select_recompute(BlendPlan& plan, double share);

}  // namespace kvlm
