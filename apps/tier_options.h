// The KV tier flags (DESIGN.md "Tiers") as run, serve and bench batch will
// take them once the engine owns a TierStack, and the namespace of a model:
// one place, so every command and `kvlm kv` agree on both.
//
//   --kv-disk DIR [--kv-disk-size BYTES] --kv-redis URL
//   [--kv-redis-password-file F] [--kv-redis-ttl SECONDS]
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

struct TierOptions {
  std::string disk;
  uint64_t disk_size = 0;  // 0: no cap
  std::string redis;
  std::string redis_password_file;
  int64_t redis_ttl_s = 3600;
};

void add_tier_options(CLI::App& app, TierOptions& o);

// The tier stack the flags describe under namespace `ns`, with
// `payload_bytes` per block (KvStorage::bytes_per_block); nullopt when no
// tier is given. Throws Error(kInvalidArgument) for inconsistent flags.
std::optional<TierStackConfig> make_tier_config(const TierOptions& o, const Hash128& ns, size_t payload_bytes);

// What makes a model's KV bytes what they are: its architecture metadata
// (general.* and <arch>.* keys), its tensor table, and an XXH3-128 digest of
// its tensor data (two fine-tunes of one base share names and shapes but not
// weights), with the KV dtype and block size.
KvNamespaceSpec kv_namespace_spec(const GgufFile& gguf, const std::string& kv_type, int32_t block_size);

}  // namespace kvlm::apps
