// The Redis tier against an attacker with full access to Redis who knows the
// model, the record format and the victim's prompt, but not the tier secret
// (docs/kv-tiers.md "Threat model"). Real redis-server, real `kvlm serve`:
// overwritten, swapped, replayed (another salt's, another prompt's) and
// planted records, all without a TTL, give the victim the answer of a run
// with no tier and 0 cached tokens; every such key is then overwritten with
// a verified record that has a TTL; nothing forged reaches the disk tier,
// which later serves the whole prompt. Servers with different secrets never
// use each other's records, and with --kv-encrypt no key or value in Redis or
// on disk holds the prompt's token ids or text.
#include <algorithm>
#include <filesystem>
#include <map>

#include <gtest/gtest.h>

#include "kv_tier_util.h"
#include "kvstore/disk_inventory.h"
#include "kvstore/record_codec.h"
#include "kvstore/redis_cluster.h"
#include "unit/kvstore/redis_server.h"

namespace kvlm::kv_tier_attack_test {

namespace fs = std::filesystem;
using test::Answer;
using test::complete;
using test::long_prompt;
using test::server_args;
using test::tier_series;

// The attacker's (and the test's) own client: any command, binary values.
class RedisHands {
 public:
  explicit RedisHands(int port) : redis_(RedisEndpoint{"127.0.0.1", port}, RedisLinkOptions{}) {}
  std::optional<RedisReply> run(RedisCommand c) { return redis_.execute(std::span(&c, 1))[0]; }
  std::map<std::string, std::string> dump() {
    std::map<std::string, std::string> out;
    auto keys = run({"KEYS", "*"});
    if (keys)
      for (const auto& k : keys->elements) out[k.str] = run({"GET", k.str})->str;
    return out;
  }
  void set(const std::string& key, const std::string& value) { run({"SET", key, value}); }  // no TTL
  int64_t ttl(const std::string& key) { return run({"TTL", key})->integer; }

 private:
  SingleRedisRouter redis_;
};

// One block of a chain as the MAC-only format shows it in clear.
struct Block {
  std::string key;
  KvRecord record;
  Hash128 ns;
};

// The keys `after` has and `before` had not, as a chain in block order
// (format 2 records: their headers and tokens are readable without the secret).
std::vector<Block> new_chain(const std::map<std::string, std::string>& before,
                             const std::map<std::string, std::string>& after) {
  std::map<std::optional<BlockHash>, Block> by_parent;
  for (const auto& [k, v] : after) {
    if (before.count(k) || v.size() < 32) continue;
    Block b{k, {}, {}};
    RecordHeader h;
    const auto body = std::as_bytes(std::span(v)).first(v.size() - 32);
    if (decode_record_body(body, std::nullopt, std::nullopt, &b.record, &h) != RecordStatus::kOk) continue;
    b.ns = h.ns;
    by_parent[b.record.parent] = std::move(b);
  }
  std::vector<Block> chain;
  for (std::optional<BlockHash> p; by_parent.count(p); p = chain.back().record.hash) chain.push_back(by_parent[p]);
  return chain;
}

TierSecurity security_of(const std::string& secret, bool encrypt = false) {
  return TierSecurity{derive_tier_keys(secret), encrypt};
}

// A server's requests that wrote this many blocks to Redis: the writes go behind.
void wait_redis(const test::ServerProcess& s, double n) { test::wait_written(s, "redis", n); }

// What an honest server wrote: the victim's prompt under four salts (one per
// attack), the same prompt under another salt, and another prompt.
struct Honest {
  std::vector<std::vector<Block>> victim;
  std::vector<Block> other_salt, other_prompt;
  std::map<std::string, std::string> values;
};

Honest write_honestly(RedisHands& hands, const std::vector<std::string>& flags) {
  Honest h;
  test::ServerProcess writer(server_args(flags));
  double num_written = 0;
  auto write = [&](const std::string& prompt, const std::string& salt) {
    const auto before = hands.dump();
    const Answer a = complete(writer, prompt, salt);
    EXPECT_EQ(a.status, 200);
    num_written += a.full_blocks();  // a block the answer fills may land later: not part of the chain below
    wait_redis(writer, num_written);
    return new_chain(before, hands.dump());
  };
  for (int i = 0; i < 4; ++i) h.victim.push_back(write(long_prompt(0), "victim-" + std::to_string(i)));
  h.other_salt = write(long_prompt(0), "someone else");
  h.other_prompt = write(long_prompt(5), "victim-0");
  h.values = hands.dump();
  return h;
}

// The attacker's moves on the first n blocks of each victim chain; every
// value goes in without a TTL.
void attack(RedisHands& hands, const Honest& h, size_t n) {
  const RecordCodec wrong(h.victim[0][0].ns, security_of("a guess at the secret, 32 bytes!"));
  for (size_t j = 0; j < n; ++j) {
    KvRecord swapped = h.victim[0][j].record;  // the victim's header and tokens, another prompt's KV
    swapped.payload = h.other_prompt[j].record.payload;
    hands.set(h.victim[0][j].key, wrong.encode(swapped));                // overwrite (MAC under a guessed key)
    hands.set(h.victim[1][j].key, h.values.at(h.other_prompt[j].key));   // swap in another prompt's valid record
    hands.set(h.victim[2][j].key, h.values.at(h.other_salt[j].key));     // replay another salt's valid record
    hands.run({"DEL", h.victim[3][j].key});                              // plant ahead of time: where the victim
    hands.set(h.victim[3][j].key, wrong.encode(swapped));                // will look, and where a server without
    const Block& b = h.victim[3][j];                                     // a secret would
    hands.set("kvlm:" + hash_hex(b.ns) + ":" + hash_hex(b.record.hash.value), encode_record(b.ns, swapped));
  }
}

// Every key the attacker touched where a lookup looks holds the victim's
// own verified record, with a TTL.
void expect_replaced(RedisHands& hands, const Honest& h, size_t n, const std::string& secret) {
  const RecordCodec codec(h.victim[0][0].ns, security_of(secret));
  for (int i = 0; i < 4; ++i) {
    for (size_t j = 0; j < n; ++j) {
      const Block& b = h.victim[i][j];
      KvRecord got;
      ASSERT_EQ(codec.decode(hands.run({"GET", b.key})->str, b.record.hash, &got), RecordStatus::kOk) << i << "/" << j;
      EXPECT_EQ(got.payload, b.record.payload);
      EXPECT_GT(hands.ttl(b.key), 0) << "attack " << i << " block " << j;
    }
  }
}

TEST(KvTierAttack, ForgedRecordsAreNeverUsedAndAreReplaced) {
  test::RedisServer redis;
  ASSERT_TRUE(redis.running());
  RedisHands hands(redis.port());
  const std::string secret = "the fleet's tier secret, 32 bytes";
  const std::vector<std::string> flags = {"--kv-redis", redis.url(), "--kv-secret-file",
                                          test::write_temp_file("tier-secret", secret + "\n")};
  const Answer want = test::cold(long_prompt(0));
  const Honest honest = write_honestly(hands, flags);
  // The blocks a lookup of the victim's prompt reads.
  const size_t n = std::min({honest.victim[0].size(), honest.other_salt.size(), honest.other_prompt.size(),
                             static_cast<size_t>(want.full_blocks())});
  ASSERT_GT(n, 30u);
  attack(hands, honest, n);

  const std::string disk = test::temp_dir() + "/attack-disk";
  std::vector<std::string> victim_flags = flags;
  victim_flags.insert(victim_flags.end(), {"--kv-disk", disk});
  {
    test::ServerProcess v(server_args(victim_flags));
    for (int i = 0; i < 4; ++i) {
      const Answer a = complete(v, long_prompt(0), "victim-" + std::to_string(i));
      ASSERT_EQ(a.status, 200);
      EXPECT_EQ(a.text, want.text) << "attack " << i;
      EXPECT_EQ(a.cached, 0) << "attack " << i << ": no token from a forged record";
    }
    EXPECT_EQ(test::server_metric(v, tier_series("kvlm_kv_tier_hit_blocks_total", "redis")), 0);
    EXPECT_GT(test::server_metric(v, tier_series("kvlm_kv_tier_refused_total", "redis", R"(,reason="bad_mac")")), 0);
    EXPECT_GT(test::server_metric(v, tier_series("kvlm_kv_tier_refused_total", "redis", R"(,reason="foreign")")), 0);
    wait_redis(v, 4.0 * static_cast<double>(n));
  }
  expect_replaced(hands, honest, n, secret);
  // The disk holds only verified records, enough to serve the prompt alone.
  const DiskVerifyReport report = verify_disk_tier(disk, false, security_of(secret));
  EXPECT_TRUE(report.bad.empty()) << report.bad[0].path << ": " << report.bad[0].reason;
  EXPECT_EQ(report.num_unchecked, 0);
  EXPECT_GE(report.num_ok, static_cast<int64_t>(n));
  hands.run({"FLUSHALL"});
  test::ServerProcess again(server_args(victim_flags));
  const Answer from_disk = complete(again, long_prompt(0), "victim-3");
  EXPECT_EQ(from_disk.text, want.text);
  EXPECT_EQ(from_disk.cached, 16 * from_disk.full_blocks());
}

TEST(KvTierAttack, ServersWithDifferentSecretsNeverShare) {
  test::RedisServer redis;
  ASSERT_TRUE(redis.running());
  RedisHands hands(redis.port());
  auto server = [&](const std::string& name, const std::string& secret) {
    return std::make_unique<test::ServerProcess>(
        server_args({"--kv-redis", redis.url(), "--kv-secret-file", test::write_temp_file(name, secret)}));
  };
  auto a = server("secret-a", "the first tenant's secret........");
  const Answer first = complete(*a, long_prompt(1));
  ASSERT_EQ(first.status, 200);
  test::wait_written(*a, "redis", first.full_blocks());
  auto b = server("secret-b", "the second tenant's secret.......");
  const Answer second = complete(*b, long_prompt(1));
  EXPECT_EQ(second.text, first.text);
  EXPECT_EQ(second.cached, 0);
  // B never even met A's records: its names are elsewhere.
  for (const char* reason : {"bad_mac", "foreign", "corrupt"})
    EXPECT_EQ(test::server_metric(*b, tier_series("kvlm_kv_tier_refused_total", "redis",
                                                  std::string(",reason=\"") + reason + "\"")), 0);
  test::wait_written(*b, "redis", second.full_blocks());
  std::map<std::string, int> per_prefix;
  for (const auto& [k, v] : hands.dump()) ++per_prefix[k.substr(0, k.rfind(':'))];
  EXPECT_EQ(per_prefix.size(), 2u) << "one key prefix per secret";
}

nlohmann::json shared_tier_status(const test::ServerProcess& s) {
  httplib::Client c("127.0.0.1", s.port());
  auto r = c.Get("/v1/status");
  EXPECT_TRUE(r && r->status == 200);
  return r ? nlohmann::json::parse(r->body)["kv_shared_tier"] : nlohmann::json();
}

// Operators see where records are unauthenticated: at start-up and in
// /v1/status. Flags that would leave records weaker than asked are refused.
TEST(KvTierAttack, AnUnauthenticatedTierSaysSoAndBadSecretsAreRefused) {
  test::RedisServer redis;
  ASSERT_TRUE(redis.running());
  const std::string secret = test::write_temp_file("status-secret", "a secret of more than 16 bytes");
  {
    test::ServerProcess plain(server_args({"--kv-redis", redis.url()}));
    const auto j = shared_tier_status(plain);
    EXPECT_EQ(j["records"], "unauthenticated");
    EXPECT_TRUE(j.contains("warning"));
    EXPECT_NE(plain.err_so_far().find("unauthenticated"), std::string::npos) << plain.err_so_far();
  }
  {
    test::ServerProcess keyed(server_args({"--kv-redis", redis.url(), "--kv-secret-file", secret}));
    const auto j = shared_tier_status(keyed);
    EXPECT_EQ(j["records"], "authenticated");
    EXPECT_FALSE(j.contains("warning"));
    EXPECT_EQ(keyed.err_so_far().find("unauthenticated"), std::string::npos);
  }
  {
    test::ServerProcess sealed(server_args({"--kv-redis", redis.url(), "--kv-secret-file", secret, "--kv-encrypt"}));
    EXPECT_EQ(shared_tier_status(sealed)["records"], "sealed");
  }
  const std::string model = test::tier_model();
  const std::string short_secret = test::write_temp_file("short-secret", "too short\n");
  for (const auto& bad : std::vector<std::vector<std::string>>{
           {"--kv-redis", redis.url(), "--kv-encrypt"},
           {"--kv-redis", redis.url(), "--kv-secret-file", short_secret},
           {"--kv-redis", redis.url(), "--kv-secret-file", "/nonexistent/secret"},
           {"--kv-secret-file", secret},
           {"--kv-redis", redis.url(), "--kv-tier-timeout-ms", "0"},
           {"--kv-redis", redis.url(), "--kv-redis-ttl", "0"}}) {
    std::vector<std::string> args = {"serve", "-m", model, "--port", "0"};
    args.insert(args.end(), bad.begin(), bad.end());
    const test::CommandResult r = test::run_kvlm(args);
    EXPECT_NE(r.exit_code, 0) << bad.back();
    EXPECT_NE(r.err.find("--kv-"), std::string::npos) << "the error names the flag: " << r.err;
  }
}

bool holds(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Windows of the prompt a leak would show: 2 token ids in a row (as the
// records store them, int32 little-endian) and 16 characters of text.
std::vector<std::string> leaks_of(const std::vector<int32_t>& ids, const std::string& text) {
  std::vector<std::string> out;
  for (size_t i = 0; i + 2 <= ids.size(); ++i) out.emplace_back(reinterpret_cast<const char*>(&ids[i]), 8);
  for (size_t i = 0; i + 16 <= text.size(); i += 16) out.push_back(text.substr(i, 16));
  return out;
}

std::vector<int32_t> tokenize(const test::ServerProcess& s, const std::string& text) {
  httplib::Client c("127.0.0.1", s.port());
  auto r = c.Post("/tokenize", nlohmann::json{{"content", text}}.dump(), "application/json");
  EXPECT_TRUE(r && r->status == 200);
  return r ? nlohmann::json::parse(r->body)["tokens"].get<std::vector<int32_t>>() : std::vector<int32_t>{};
}

TEST(KvTierAttack, EncryptedRecordsHideThePromptAndStillServeIt) {
  test::RedisServer redis;
  ASSERT_TRUE(redis.running());
  RedisHands hands(redis.port());
  const std::string secret_file = test::write_temp_file("sealing-secret", "the sealing servers' secret......");
  const std::string disk = test::temp_dir() + "/sealed-disk";
  auto flags = [&](const std::string& dir) {
    return server_args({"--kv-redis", redis.url(), "--kv-secret-file", secret_file, "--kv-encrypt", "--kv-disk", dir});
  };
  test::ServerProcess e(flags(disk));
  const std::string prompt = long_prompt(2);
  const Answer first = complete(e, prompt, "sealed");
  ASSERT_EQ(first.status, 200);
  test::wait_written(e, "redis", first.full_blocks());
  test::wait_written(e, "disk", first.full_blocks());
  const std::vector<std::string> leaks = leaks_of(tokenize(e, prompt), prompt);
  ASSERT_GT(leaks.size(), 500u);
  // The scan finds a leak where there is one: a MAC-only record shows its tokens.
  KvRecord shown;
  shown.tokens = tokenize(e, prompt);
  shown.tokens.resize(16);
  const std::string mac_only = RecordCodec(Hash128{}, security_of("any secret of enough bytes")).encode(shown);
  EXPECT_TRUE(std::any_of(leaks.begin(), leaks.end(), [&](const auto& l) { return holds(mac_only, l); }));

  const auto stored = hands.dump();
  ASSERT_GE(stored.size(), static_cast<size_t>(first.full_blocks()));
  for (const auto& [k, v] : stored)
    for (const auto& l : leaks) ASSERT_FALSE(holds(k, l) || holds(v, l)) << "Redis key " << k;
  size_t num_files = 0;
  for (const auto& f : fs::recursive_directory_iterator(disk)) {
    if (!f.is_regular_file()) continue;
    ++num_files;
    const std::string bytes = test::read_file(f.path().string());
    for (const auto& l : leaks) ASSERT_FALSE(holds(f.path().string(), l) || holds(bytes, l)) << f.path();
  }
  EXPECT_GE(num_files, static_cast<size_t>(first.full_blocks()));
  // Sealed records are records all the same: another sealing server uses them.
  test::ServerProcess other(flags(test::temp_dir() + "/sealed-disk-2"));
  const Answer second = complete(other, prompt, "sealed");
  EXPECT_EQ(second.text, first.text);
  EXPECT_EQ(second.cached, 16 * second.full_blocks());
}

}  // namespace kvlm::kv_tier_attack_test
