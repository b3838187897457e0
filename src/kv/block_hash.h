// Content hash of a full KV block, chained to its parent block's hash, so a
// hit on block i means the whole prefix up to and including block i matches
// (docs/ARCHITECTURE.md "Blocks and the pool"). 128 bits: a collision,
// which would hand one prompt another prompt's KV, is negligible.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/hash.h"

namespace kvlm {

struct BlockHash {
  Hash128 value;
  auto operator<=>(const BlockHash&) const = default;
};

// Hash of a block holding `tokens` (exactly block_size ids) after `parent`
// (nullopt for the first block). `extra_key` separates caches that must not
// share blocks even for equal tokens (a cache salt, a LoRA id); 0 for none.
BlockHash hash_block(std::optional<BlockHash> parent, std::span<const int32_t> tokens,
                     uint64_t extra_key = 0);

// The key under which KV group `group` caches a block whose chain hash is
// `h`: each group keeps its own physical copy of a block's tokens (its layers'
// K/V), so the groups must not find each other's blocks. Group 0 uses h.
BlockHash hash_for_group(const BlockHash& h, int32_t group);

// The extra_key of a request's cache_salt (vLLM's prefix-cache namespace):
// never 0, which means "shared".
uint64_t cache_salt_key(std::string_view salt);

// The extra_key of a request run with a LoRA adapter whose identity (the
// digest of its tensors and scale, model/lora.h) is `adapter`, from its
// cache_salt_key (0: no salt): never 0, different for every adapter, so no
// two adapters (nor an adapter and the base) share a block.
uint64_t adapter_extra_key(const Hash128& adapter, uint64_t salt_key);

// The extra_key under which KV chunks (kv_chunks.h) of requests with
// `extra_key` are cached: a chunk's blocks hold KV computed as if the chunk
// stood alone, so they must never be found as a prompt's prefix blocks.
// Never 0 and never equal to extra_key.
uint64_t kv_chunk_extra_key(uint64_t extra_key);

// 32 lowercase hex digits (hi then lo), the form KV events and the router
// exchange; from_hex is nullopt for anything else.
std::string block_hash_hex(const BlockHash& h);
std::optional<BlockHash> block_hash_from_hex(std::string_view hex);

// Hashes of every full block of `tokens` (tokens.size() / block_size of them).
std::vector<BlockHash> hash_full_blocks(std::span<const int32_t> tokens, int32_t block_size,
                                        uint64_t extra_key = 0);

}  // namespace kvlm

template <>
struct std::hash<kvlm::BlockHash> {
  size_t operator()(const kvlm::BlockHash& h) const noexcept { return std::hash<kvlm::Hash128>{}(h.value); }
};
