#include "apps/tier_options.h"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>

#include "backend/dtype.h"
#include "common/error.h"
#include "common/log.h"
#include "model/gguf.h"

namespace kvlm::apps {

void add_tier_options(CLI::App& app, TierOptions& o) {
  app.add_option("--kv-disk", o.disk, "disk KV tier directory (survives restarts)");
  app.add_option("--kv-disk-size", o.disk_size, "size cap of the disk tier in bytes (K/M/G suffixes; default: none)")
      ->transform(CLI::AsSizeValue(false));
  app.add_option("--kv-disk-fsync", o.disk_fsync,
                 "what survives a power loss: none (the page cache decides), batch (a syncfs after each "
                 "write-back batch), always (fsync of each record and its directory before the next)")
      ->check(CLI::IsMember({"none", "batch", "always"}))
      ->capture_default_str();
  app.add_option("--kv-redis", o.redis, "shared KV tier: redis://HOST:PORT[/DB] or redis+cluster://HOST:PORT,...");
  app.add_option("--kv-redis-password-file", o.redis_password_file, "file whose first line is the Redis password");
  app.add_option("--kv-redis-ttl", o.redis_ttl_s, "expiry of Redis tier records in seconds")->capture_default_str();
  app.add_option("--kv-secret-file", o.secret_file,
                 "file holding the tier secret (the same on every server sharing the tiers): records carry an "
                 "HMAC-SHA-256 and are stored under keyed names");
  app.add_flag("--kv-encrypt", o.encrypt, "seal tier records with AES-256-GCM (needs --kv-secret-file)");
  app.add_option("--kv-tier-timeout-ms", o.tier_timeout_ms,
                 "deadline of a whole tier lookup; past it the request goes on and computes the blocks")
      ->capture_default_str();
}

namespace {

TierSecurity tier_security(const TierOptions& o) {
  TierSecurity s;
  if (o.encrypt && o.secret_file.empty())
    throw_error(ErrorCode::kInvalidArgument, "--kv-encrypt needs --kv-secret-file: its key comes from the secret");
  if (!o.secret_file.empty()) s.keys = derive_tier_keys(read_tier_secret(o.secret_file, "--kv-secret-file"));
  s.encrypt = o.encrypt;
  return s;
}

}  // namespace

std::optional<TierStackConfig> make_tier_config(const TierOptions& o, const Hash128& ns, int32_t block_size,
                                                size_t payload_bytes) {
  if (o.disk.empty() && o.redis.empty()) {
    if (o.disk_size != 0) throw_error(ErrorCode::kInvalidArgument, "--kv-disk-size needs --kv-disk");
    if (o.disk_fsync != "none") throw_error(ErrorCode::kInvalidArgument, "--kv-disk-fsync needs --kv-disk");
    if (!o.redis_password_file.empty())
      throw_error(ErrorCode::kInvalidArgument, "--kv-redis-password-file needs --kv-redis");
    if (!o.secret_file.empty() || o.encrypt)
      throw_error(ErrorCode::kInvalidArgument, "--kv-secret-file and --kv-encrypt need --kv-disk or --kv-redis");
    return std::nullopt;
  }
  if (o.redis_ttl_s <= 0) throw_error(ErrorCode::kInvalidArgument, "--kv-redis-ttl must be positive");
  if (o.tier_timeout_ms <= 0) throw_error(ErrorCode::kInvalidArgument, "--kv-tier-timeout-ms must be positive");
  const TierSecurity security = tier_security(o);
  TierStackConfig c;
  c.payload_bytes = payload_bytes;
  c.lookup_timeout_s = static_cast<double>(o.tier_timeout_ms) / 1e3;
  if (!o.disk.empty()) c.disk = DiskStoreConfig{o.disk, o.disk_size, ns, security};
  if (c.disk) c.disk->fsync = parse_disk_fsync(o.disk_fsync);
  if (!o.redis.empty()) {
    RedisStoreConfig r;
    r.url = o.redis;
    r.password_file = o.redis_password_file;
    r.ttl_s = o.redis_ttl_s;
    r.ns = ns;
    r.security = security;
    r.block_size = block_size;
    r.payload_bytes = payload_bytes;
    c.redis = r;
    if (!security.authenticated())
      log_warn("--kv-redis {}: tier records are unauthenticated: anyone who can write to this Redis can change what "
               "requests compute, and anyone who can read it can read their prompts' token ids; give every server "
               "the same --kv-secret-file (and --kv-encrypt) (docs/kv-tiers.md)",
               o.redis);
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
    for (const auto& [data, size] : t.byte_ranges()) XXH3_128bits_update(&state, data, size);
  }
  XXH128_hash_t h = XXH3_128bits_digest(&state);
  s.model.data_digest = Hash128{h.low64, h.high64};
  s.kv_dtype = kv_type;
  s.block_size = block_size;
  return s;
}

}  // namespace kvlm::apps
