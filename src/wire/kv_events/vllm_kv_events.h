// KV events in vLLM's wire format (vllm/distributed/kv_events.py), which
// llm-d's precise prefix-cache scorer and Dynamo's KV router read: each ZMQ
// message is [topic, seq (u64 big-endian), payload], the payload a
// MessagePack array [ts, [event, ...], dp_rank], each event an array whose
// first element is its type's name (msgspec's array_like structs with
// tag=True; trailing fields at their default are left out, as msgspec's
// omit_defaults does):
//   ["BlockStored", block_hashes, parent_block_hash, token_ids, block_size,
//    lora_id, medium, lora_name[, extra_keys]]
//   ["BlockRemoved", block_hashes, medium]
//   ["AllBlocksCleared"]
// Hashes are integers (the low 64 bits of kvlm's 128-bit chain hash).
//
// VllmEventConverter turns the engine's KvEvents into these, holding what
// the readers rely on (docs/router.md "KV events over ZMQ").
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_set>
#include <variant>
#include <vector>

#include "kv/block_pool.h"

namespace kvlm::vllm_events {

// One run of blocks of one chain, each the next one's parent.
struct BlockStored {
  std::vector<uint64_t> block_hashes;
  std::optional<uint64_t> parent_block_hash;  // the first block's parent (nullopt: a chain's first block)
  std::vector<int32_t> token_ids;             // block_size per block, in order
  int32_t block_size = 0;
  std::string medium;
  // Empty (left out of the message), or one entry per block: block 0 of a
  // salted chain has its cache salt's key (16 hex digits), the rest none.
  std::vector<std::optional<std::vector<std::string>>> extra_keys;
};

struct BlockRemoved {
  std::vector<uint64_t> block_hashes;
  std::string medium;
};

struct AllBlocksCleared {};

using Event = std::variant<BlockStored, BlockRemoved, AllBlocksCleared>;

// The payload of one message: [ts, [events], dp_rank]. ts in seconds since the epoch.
std::string encode_batch(double ts, std::span<const Event> events, int64_t dp_rank = 0);

// The key readers see for a block.
inline uint64_t wire_hash(const BlockHash& h) { return h.value.lo; }

// The topic vLLM's workers publish under for llm-d: "kv@ADDRESS@MODEL",
// ADDRESS the host:port a picker sends requests to.
std::string topic(std::string_view address, std::string_view model);

// The engine's events, in order, into vLLM's. What it keeps true:
// - a BlockStored's parent was published before it and is still held (llm-d
//   drops a block whose parent it does not know): a block whose parent is
//   not held, and every block after it in its chain, is not published;
// - no hash is stored twice while held (Dynamo refuses duplicates);
// - a BlockRemoved names only published blocks;
// - only blocks whose content the event carries (group 0's, recorded with
//   contents) are published; the rest are not for these readers.
// Consecutive blocks of one chain share one BlockStored, consecutive
// removals one BlockRemoved, as vLLM's own events do.
class Converter {
 public:
  Converter(int32_t block_size, std::string medium) : block_size_(block_size), medium_(std::move(medium)) {}

  std::vector<Event> convert(std::span<const KvEvent> events);
  // Start over (a reader fell behind): nothing is held any more.
  Event clear();
  size_t num_published() const { return published_.size(); }

 private:
  void stored(const KvEvent& e, std::vector<Event>& out);
  void removed(const KvEvent& e, std::vector<Event>& out);

  int32_t block_size_;
  std::string medium_;
  std::unordered_set<uint64_t> published_;  // wire hashes published and not removed since
};

}  // namespace kvlm::vllm_events
