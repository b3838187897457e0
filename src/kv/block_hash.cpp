#include "kv/block_hash.h"

#include <cstring>

#include "common/assert.h"

namespace kvlm {

BlockHash hash_block(std::optional<BlockHash> parent, std::span<const int32_t> tokens,
                     uint64_t extra_key) {
  // The parent hash is the seed, so equal tokens after different prefixes hash
  // differently; extra_key rides after the token bytes so a salt separates
  // caches even for identical prompts.
  std::vector<uint8_t> bytes(tokens.size_bytes() + sizeof(extra_key));
  if (!tokens.empty()) std::memcpy(bytes.data(), tokens.data(), tokens.size_bytes());
  std::memcpy(bytes.data() + tokens.size_bytes(), &extra_key, sizeof(extra_key));
  Hash128 seed = parent ? parent->value : Hash128{};
  return BlockHash{hash128(bytes.data(), bytes.size(), seed)};
}

BlockHash hash_for_group(const BlockHash& h, int32_t group) {
  if (group == 0) return h;
  return BlockHash{hash128(&group, sizeof(group), h.value)};
}

std::vector<BlockHash> hash_full_blocks(std::span<const int32_t> tokens, int32_t block_size,
                                        uint64_t extra_key) {
  KVLM_ASSERT(block_size > 0, "block_size must be positive");
  size_t num_full = tokens.size() / static_cast<size_t>(block_size);
  std::vector<BlockHash> hashes;
  hashes.reserve(num_full);
  std::optional<BlockHash> parent;
  for (size_t i = 0; i < num_full; ++i) {
    BlockHash h = hash_block(parent, tokens.subspan(i * block_size, block_size), extra_key);
    hashes.push_back(h);
    parent = h;
  }
  return hashes;
}

}  // namespace kvlm
