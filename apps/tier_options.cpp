#include "apps/tier_options.h"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>

#include "backend/dtype.h"
#include "common/error.h"
#include "model/gguf.h"

namespace kvlm::apps {

void add_tier_options(CLI::App& app, TierOptions& o) {
  app.add_option("--kv-disk", o.disk, "disk KV tier directory (survives restarts)");
  app.add_option("--kv-disk-size", o.disk_size, "size cap of the disk tier in bytes (K/M/G suffixes; default: none)")
      ->transform(CLI::AsSizeValue(false));
  app.add_option("--kv-redis", o.redis, "shared KV tier: redis://HOST:PORT[/DB] or redis+cluster://HOST:PORT,...");
  app.add_option("--kv-redis-password-file", o.redis_password_file, "file whose first line is the Redis password");
  app.add_option("--kv-redis-ttl", o.redis_ttl_s, "expiry of Redis tier records in seconds")->capture_default_str();
}

std::optional<TierStackConfig> make_tier_config(const TierOptions& o, const Hash128& ns, size_t payload_bytes) {
  if (o.disk.empty() && o.redis.empty()) {
    if (o.disk_size != 0) throw_error(ErrorCode::kInvalidArgument, "--kv-disk-size needs --kv-disk");
    if (!o.redis_password_file.empty())
      throw_error(ErrorCode::kInvalidArgument, "--kv-redis-password-file needs --kv-redis");
    return std::nullopt;
  }
  if (o.redis_ttl_s <= 0) throw_error(ErrorCode::kInvalidArgument, "--kv-redis-ttl must be positive");
  TierStackConfig c;
  c.payload_bytes = payload_bytes;
  if (!o.disk.empty()) c.disk = DiskStoreConfig{o.disk, o.disk_size, ns};
  if (!o.redis.empty()) {
    RedisStoreConfig r;
    r.url = o.redis;
    r.password_file = o.redis_password_file;
    r.ttl_s = o.redis_ttl_s;
    r.ns = ns;
    c.redis = r;
  }
  return c;
}

KvNamespaceSpec kv_namespace_spec(const GgufFile& gguf, const std::string& kv_type, int32_t block_size) {
  KvNamespaceSpec s;
  const Metadata& m = gguf.metadata();
  s.model.architecture = m.get_string("general.architecture").value_or("");
  const std::string arch_prefix = s.model.architecture + ".";
  for (const auto& [key, value] : m.entries())
    if (key.starts_with("general.") || key.starts_with(arch_prefix))
      s.model.metadata.emplace_back(key, value.to_string(static_cast<size_t>(-1)));
  XXH3_state_t state;
  XXH3_128bits_reset(&state);
  for (const auto& t : gguf.tensors()) {
    s.model.tensors.push_back({t.name, std::string(dtype_name(t.dtype)), t.dims, t.num_bytes});
    XXH3_128bits_update(&state, t.data, t.num_bytes);
  }
  XXH128_hash_t h = XXH3_128bits_digest(&state);
  s.model.data_digest = Hash128{h.low64, h.high64};
  s.kv_dtype = kv_type;
  s.block_size = block_size;
  return s;
}

}  // namespace kvlm::apps
