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

uint64_t cache_salt_key(std::string_view salt) { return hash128(salt.data(), salt.size()).lo | 1; }

uint64_t adapter_extra_key(const Hash128& adapter, uint64_t salt_key) {
  // Seeded by the identity; the salt rides inside, so salted requests of one
  // adapter stay apart too.
  return hash128(&salt_key, sizeof(salt_key), adapter).lo | 1;
}

uint64_t kv_chunk_extra_key(uint64_t extra_key) {
  static constexpr char kChunk[] = "kvlm kv chunk";
  const uint64_t key = hash128(kChunk, sizeof(kChunk) - 1, Hash128{extra_key, 0}).lo | 1;
  return key == extra_key ? key ^ 2 : key;
}

std::string block_hash_hex(const BlockHash& h) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(32, '0');
  for (int i = 0; i < 16; ++i) {
    out[15 - i] = kDigits[(h.value.hi >> (4 * i)) & 0xf];
    out[31 - i] = kDigits[(h.value.lo >> (4 * i)) & 0xf];
  }
  return out;
}

std::optional<BlockHash> block_hash_from_hex(std::string_view hex) {
  if (hex.size() != 32) return std::nullopt;
  uint64_t words[2] = {0, 0};
  for (size_t i = 0; i < 32; ++i) {
    const char c = hex[i];
    const int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (v < 0) return std::nullopt;
    words[i / 16] = words[i / 16] << 4 | static_cast<uint64_t>(v);
  }
  return BlockHash{Hash128{words[1], words[0]}};
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
