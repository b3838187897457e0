// kvlm kv bench: store and load speed of a KV tier, in batches the size of
// one prompt prefix (default 1,024 tokens = 64 blocks of 16), with blocks the
// size of TinyLlama-1.1B's F16 KV (22 layers x K,V x 4 heads x 64 x 16 slots
// x 2 bytes = 360,448 bytes). Each iteration writes a new prefix's records in
// one store() call (one pipeline on Redis) and loads them back in one load()
// call, as the I/O thread does. --kv-secret-file (and --kv-encrypt) measure
// the records' MAC (and sealing) too.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <random>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "apps/cli_parse.h"
#include "apps/commands.h"
#include "apps/tier_options.h"
#include "common/error.h"
#include "kvstore/disk_store.h"
#include "kvstore/redis_store.h"

namespace kvlm::apps {
namespace {

const TierSecurity& security_of(const TierStackConfig& c) { return c.disk ? c.disk->security : c.redis->security; }

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

std::vector<KvRecord> make_prefix(int32_t num_blocks, int32_t block_size, size_t block_bytes, std::mt19937_64& rng) {
  std::vector<KvRecord> out;
  std::optional<BlockHash> parent;
  for (int32_t b = 0; b < num_blocks; ++b) {
    KvRecord r;
    for (int32_t t = 0; t < block_size; ++t) r.tokens.push_back(static_cast<int32_t>(rng() % 32000));
    r.parent = parent;
    r.hash = hash_block(parent, r.tokens);
    r.payload.resize(block_bytes);
    for (size_t i = 0; i < block_bytes; i += 8) {
      uint64_t x = rng();
      std::memcpy(r.payload.data() + i, &x, std::min<size_t>(8, block_bytes - i));
    }
    parent = r.hash;
    out.push_back(std::move(r));
  }
  return out;
}

// Seconds to encode `prefix` with `codec` and to decode it back, in memory:
// what the records' checksum, MAC or sealing cost apart from the tier's I/O
// (which on a busy machine varies more than they cost).
std::pair<double, double> codec_seconds(const RecordCodec& codec, const std::vector<KvRecord>& prefix) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> encoded;
  for (const auto& r : prefix) encoded.push_back(codec.encode(r));
  const auto t1 = std::chrono::steady_clock::now();
  KvRecord back;
  for (size_t i = 0; i < prefix.size(); ++i)
    if (codec.decode(encoded[i], prefix[i].hash, &back) != RecordStatus::kOk)
      throw_error(ErrorCode::kInternal, "a record did not decode as it was encoded");
  const auto t2 = std::chrono::steady_clock::now();
  return {std::chrono::duration<double>(t1 - t0).count(), std::chrono::duration<double>(t2 - t1).count()};
}

}  // namespace

int cmd_kv_bench(int argc, char** argv) {
  CLI::App app{"Store/load throughput and latency of a KV tier", "kvlm kv bench"};
  TierOptions tiers;
  int32_t prefix_tokens = 1024, block_size = 16, iterations = 10;
  size_t block_bytes = 360448;
  add_tier_options(app, tiers);  // a scratch namespace is used (disk: removed after)
  app.add_option("--prefix-tokens", prefix_tokens, "tokens per batch (one prompt prefix)")->check(CLI::PositiveNumber);
  app.add_option("--block-size", block_size, "tokens per block")->check(CLI::PositiveNumber);
  app.add_option("--block-bytes", block_bytes, "KV bytes per block")->check(CLI::PositiveNumber);
  app.add_option("--iterations", iterations, "batches stored and loaded")->check(CLI::PositiveNumber);
  KVLM_PARSE(app, argc, argv);
  if (tiers.disk.empty() == tiers.redis.empty())
    throw_error(ErrorCode::kInvalidArgument, "give one of --kv-disk or --kv-redis");

  std::mt19937_64 rng(std::random_device{}());
  const Hash128 ns{rng(), rng()};  // a scratch namespace: never collides with a real one
  const TierStackConfig config = *make_tier_config(tiers, ns, block_size, block_bytes);
  std::unique_ptr<KvStore> store;
  if (config.disk) store = DiskStore::open(*config.disk);
  else store = RedisStore::open(*config.redis);

  const int32_t num_blocks = prefix_tokens / block_size;
  const RecordCodec codec(ns, security_of(config));
  std::vector<double> store_s, load_s, encode_s, decode_s;
  size_t num_bytes = 0;
  for (int32_t it = 0; it < iterations; ++it) {
    auto prefix = make_prefix(num_blocks, block_size, block_bytes, rng);
    std::vector<BlockHash> hashes;
    for (const auto& r : prefix) hashes.push_back(r.hash);
    auto t0 = std::chrono::steady_clock::now();
    const size_t num_stored = store->store(prefix);
    auto t1 = std::chrono::steady_clock::now();
    const size_t num_loaded = store->load(hashes).size();
    auto t2 = std::chrono::steady_clock::now();
    if (num_stored != prefix.size() || num_loaded != prefix.size())
      throw_error(ErrorCode::kUnavailable, "iteration {}: stored {} and loaded {} of {} blocks (tier full or down?)", it,
                  num_stored, num_loaded, prefix.size());
    store_s.push_back(std::chrono::duration<double>(t1 - t0).count());
    load_s.push_back(std::chrono::duration<double>(t2 - t1).count());
    num_bytes = codec.encoded_bytes(static_cast<size_t>(block_size), block_bytes) * prefix.size();
    const auto [enc, dec] = codec_seconds(codec, prefix);
    encode_s.push_back(enc);
    decode_s.push_back(dec);
  }
  const double mib = static_cast<double>(num_bytes) / 1048576.0;
  auto line = [&](const char* what, const std::vector<double>& v) {
    const double p50 = percentile(v, 0.5);
    fmt::print("{:<5} {} blocks ({:.1f} MiB) per batch: p50 {:.2f} ms, p99 {:.2f} ms, {:.0f} MiB/s at p50, "
               "{:.1f} us/block\n",
               what, num_blocks, mib, p50 * 1e3, percentile(v, 0.99) * 1e3, mib / p50, p50 * 1e6 / num_blocks);
  };
  const TierSecurity& security = security_of(config);
  fmt::print("tier {} ({} iterations, {}-token prefixes, {}-byte blocks, records {})\n", store->name(), iterations,
             prefix_tokens, block_bytes,
             security.encrypt ? "sealed (AES-256-GCM)" : security.authenticated() ? "with HMAC-SHA-256" : "unauthenticated");
  line("store", store_s);
  line("load", load_s);
  line("encode", encode_s);  // in memory: the codec's share of store
  line("decode", decode_s);  // ... and of load
  if (config.disk) {
    // Leave no scratch records behind.
    std::error_code ec;
    std::filesystem::remove_all(static_cast<DiskStore&>(*store).ns_dir(), ec);
  }
  return 0;
}

}  // namespace kvlm::apps
