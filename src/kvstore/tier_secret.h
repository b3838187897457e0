// The tier secret (--kv-secret-file) and the keys derived from it
// (docs/kv-tiers.md "Threat model"). Every server that shares a tier holds
// the same secret; from it come three independent 256-bit keys, so a key
// used for one purpose never meets another purpose's inputs:
//
//   mac    HMAC-SHA-256 over a whole record (record_codec.h, format 2)
//   names  HMAC-SHA-256 of a block hash: the name a record is stored under,
//          and of the namespace: the Redis key prefix and disk directory
//   seal   per-record AES-256-GCM keys (format 3, --kv-encrypt)
//
// Derivation is HKDF-SHA-256 (RFC 5869) with a fixed salt and one `info`
// label per key; 32 bytes is one HMAC block of output, so expand is a
// single HMAC.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace kvlm {

inline constexpr size_t kTierKeyBytes = 32;
// Shorter secrets are refused: a guessable secret lets anyone forge records.
inline constexpr size_t kMinTierSecretBytes = 16;
inline constexpr size_t kMaxTierSecretBytes = 4096;

using TierKey = std::array<unsigned char, kTierKeyBytes>;
using Sha256 = std::array<unsigned char, 32>;

struct TierKeys {
  TierKey mac;
  TierKey names;
  TierKey seal;
};

// What protects a tier's records. No keys: records carry an unkeyed checksum
// only (format 1), which anyone who can write to the tier can recompute.
struct TierSecurity {
  std::optional<TierKeys> keys;  // from --kv-secret-file
  bool encrypt = false;          // --kv-encrypt (needs keys)
  bool authenticated() const { return keys.has_value(); }
};

TierKeys derive_tier_keys(std::string_view secret);

// The secret in `path`: its bytes, less one trailing newline (so `openssl
// rand -hex 32 > F` and an editor's file give the same secret). Throws
// Error naming `flag` if the file cannot be read or holds fewer than
// kMinTierSecretBytes or more than kMaxTierSecretBytes bytes; warns (log)
// if others than the owner may read it.
std::string read_tier_secret(const std::string& path, const std::string& flag);

// HMAC-SHA-256 of `data` under `key` (OpenSSL).
Sha256 hmac_sha256(std::span<const unsigned char> key, std::span<const std::byte> data);
// HKDF-SHA-256 (RFC 5869) with one block of output (32 bytes).
TierKey hkdf_sha256(std::span<const unsigned char> salt, std::span<const std::byte> ikm, std::string_view info);

}  // namespace kvlm
