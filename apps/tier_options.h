// The KV tier flags (docs/kv-tiers.md) as run, serve and bench batch take
// them, and the namespace of a model: one place, so every command and
// `kvlm kv` agree on both.
//
//   --kv-disk DIR [--kv-disk-size BYTES] --kv-redis URL
//   [--kv-redis-password-file F] [--kv-redis-ttl SECONDS]
//   [--kv-secret-file F [--kv-encrypt]] [--kv-tier-timeout-ms MS]
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "kvstore/kv_namespace.h"
#include "kvstore/tier_stack.h"

namespace kvlm {
class GgufFile;
}

namespace kvlm::apps {

// The default of --kv-tier-timeout-ms; why this value: docs/kv-tiers.md "Deadlines".
inline constexpr int64_t kDefaultTierTimeoutMs = 250;

struct TierOptions {
  std::string disk;
  uint64_t disk_size = 0;  // 0: no cap
  std::string disk_fsync = "none";  // none, batch, always (kvstore/disk_files.h)
  std::string redis;
  std::string redis_password_file;
  int64_t redis_ttl_s = 3600;
  std::string secret_file;  // --kv-secret-file: records carry a MAC, names are keyed
  bool encrypt = false;     // --kv-encrypt: records are sealed (AES-256-GCM)
  int64_t tier_timeout_ms = kDefaultTierTimeoutMs;
};

void add_tier_options(CLI::App& app, TierOptions& o);

// The tier stack the flags describe under namespace `ns`, for blocks of
// `block_size` tokens and `payload_bytes` bytes (KvStorage::bytes_per_block);
// nullopt when no tier is given. Throws Error(kInvalidArgument) for
// inconsistent flags and Error for an unreadable or short secret file. Logs
// a warning when a Redis tier's records would be unauthenticated.
std::optional<TierStackConfig> make_tier_config(const TierOptions& o, const Hash128& ns, int32_t block_size,
                                                size_t payload_bytes);

// What makes a model's KV bytes what they are: its architecture metadata
// (general.* and <arch>.* keys), its tensor table, and an XXH3-128 digest of
// its tensor data (two fine-tunes of one base share names and shapes but not
// weights), with the KV dtype and block size.
KvNamespaceSpec kv_namespace_spec(const GgufFile& gguf, const std::string& kv_type, int32_t block_size);

}  // namespace kvlm::apps
