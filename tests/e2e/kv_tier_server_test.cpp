// KV tiers through `kvlm serve`: a disk tier that survives a restart, a
// Redis tier (and a Redis Cluster) shared by two servers, Redis killed in the
// middle of a stream of requests, and corrupted disk records. Every answer is
// the cold answer; hits show in usage.prompt_tokens_details.cached_tokens.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "kv_tier_util.h"
#include "support/test_support.h"
#include "unit/kvstore/redis_server.h"

namespace kvlm::kv_tier_server_test {

namespace fs = std::filesystem;
using test::Answer;
using test::cold;
using test::complete;
using test::long_prompt;
using test::server_args;
using test::wait_written;

TEST(KvTierDisk, SurvivesARestartAndLoadsTheSameKv) {
  const std::string dir = test::temp_dir() + "/disk-restart";
  const Answer want = cold(long_prompt());
  {
    test::ServerProcess first(server_args({"--kv-disk", dir}));
    const Answer a = complete(first, long_prompt());
    ASSERT_EQ(a.status, 200);
    EXPECT_EQ(a.text, want.text);
    EXPECT_EQ(a.cached, 0);
    wait_written(first, "disk", a.full_blocks());
  }
  test::ServerProcess second(server_args({"--kv-disk", dir}));
  const Answer b = complete(second, long_prompt());
  ASSERT_EQ(b.status, 200);
  EXPECT_EQ(b.text, want.text);
  EXPECT_EQ(b.cached, 16 * b.full_blocks()) << "every full block of the prompt comes from the disk tier";
  EXPECT_EQ(test::server_metric(second, R"(kvlm_kv_tier_hit_tokens_total{model_name="llama"})"), 16 * b.full_blocks());
}

TEST(KvTierDisk, CorruptRecordsAreSkippedAndTheAnswerStaysCold) {
  const std::string dir = test::temp_dir() + "/disk-corrupt";
  const Answer want = cold(long_prompt(1));
  {
    test::ServerProcess first(server_args({"--kv-disk", dir}));
    const Answer a = complete(first, long_prompt(1));
    ASSERT_EQ(a.status, 200);
    wait_written(first, "disk", a.full_blocks());
  }
  // Flip a byte in the middle of every third record and truncate every fifth.
  int i = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const std::string path = e.path().string();
    std::string bytes = test::read_file(path);
    if (i % 3 == 0) bytes[bytes.size() / 2] ^= 0x40;
    if (i % 5 == 1) bytes.resize(bytes.size() / 2);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    ++i;
  }
  ASSERT_GT(i, 10);
  test::ServerProcess second(server_args({"--kv-disk", dir}));
  const Answer b = complete(second, long_prompt(1));
  ASSERT_EQ(b.status, 200);
  EXPECT_EQ(b.text, want.text);
  EXPECT_LT(b.cached, 16 * b.full_blocks()) << "a hit stops at the first bad record";
  EXPECT_GT(test::server_metric(second, R"(kvlm_kv_tier_corrupt_records_total{model_name="llama",tier="disk"})"), 0);
}

TEST(KvTierDisk, ACapSmallerThanOneRecordIsAMissNeverAnError) {
  const std::string dir = test::temp_dir() + "/disk-tiny";
  const Answer want = cold(long_prompt(4));
  test::ServerProcess s(server_args({"--kv-disk", dir, "--kv-disk-size", "1000"}));
  for (int i = 0; i < 2; ++i) {
    const Answer a = complete(s, long_prompt(4));
    ASSERT_EQ(a.status, 200);
    EXPECT_EQ(a.text, want.text);
  }
  const std::string dropped = R"(kvlm_kv_tier_blocks_dropped_total{model_name="llama",tier="disk"})";
  for (int i = 0; i < 300 && test::server_metric(s, dropped) <= 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_GT(test::server_metric(s, dropped), 0);
  EXPECT_EQ(test::server_metric(s, R"(kvlm_kv_tier_records{model_name="llama",tier="disk"})"), 0);
}

TEST(KvTierRedis, TwoServersShareOnePrefill) {
  test::RedisServer redis;
  const Answer want = cold(long_prompt(2));
  test::ServerProcess a(server_args({"--kv-redis", redis.url()}));
  test::ServerProcess b(server_args({"--kv-redis", redis.url()}));
  const Answer first = complete(a, long_prompt(2));
  ASSERT_EQ(first.status, 200);
  EXPECT_EQ(first.cached, 0);
  wait_written(a, "redis", first.full_blocks());
  const Answer second = complete(b, long_prompt(2));
  ASSERT_EQ(second.status, 200);
  EXPECT_EQ(second.text, want.text);
  EXPECT_EQ(second.cached, 16 * second.full_blocks()) << "server B loads what server A prefilled";
}

TEST(KvTierRedis, ClusterIsSharedToo) {
  test::RedisCluster cluster;
  const Answer want = cold(long_prompt(3));
  test::ServerProcess a(server_args({"--kv-redis", cluster.url()}));
  test::ServerProcess b(server_args({"--kv-redis", cluster.url()}));
  const Answer first = complete(a, long_prompt(3));
  ASSERT_EQ(first.status, 200);
  wait_written(a, "redis", first.full_blocks());
  const Answer second = complete(b, long_prompt(3));
  ASSERT_EQ(second.status, 200);
  EXPECT_EQ(second.text, want.text);
  EXPECT_EQ(second.cached, 16 * second.full_blocks());
}

TEST(KvTierRedis, KilledInTheMiddleEveryRequestIsStillAnswered) {
  test::RedisServer redis;
  std::vector<Answer> want;
  for (int v = 0; v < 7; ++v) want.push_back(cold(long_prompt(v)));
  test::ServerProcess writer(server_args({"--kv-redis", redis.url()}));
  int num_blocks = 0;
  for (int v = 0; v < 3; ++v) {
    const Answer a = complete(writer, long_prompt(v));
    ASSERT_EQ(a.status, 200);
    num_blocks += a.full_blocks();
  }
  wait_written(writer, "redis", num_blocks);
  // A pool of 64 blocks: each ~37-block prompt pushes most of the last one
  // out of RAM, so every request asks Redis again.
  test::ServerProcess reader(server_args({"--kv-redis", redis.url(), "--ctx", "1024"}));
  int failed = 0, num_hits = 0;
  for (int round = 0; round < 3; ++round) {
    if (round == 1) redis.kill();
    if (round == 2) redis.restart();  // empty again: misses, until writes fill it
    for (int v = 0; v < 6; ++v) {
      const Answer a = complete(reader, long_prompt(v));
      if (a.status != 200) ++failed;
      if (round == 0 && a.cached > 0) ++num_hits;
      EXPECT_EQ(a.text, want[v].text) << "round " << round << " prompt " << v;
    }
  }
  EXPECT_EQ(failed, 0);
  EXPECT_GE(num_hits, 3) << "before the kill, the writer's prompts were hits";
  httplib::Client c("127.0.0.1", reader.port());
  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_GT(test::server_metric(reader, R"(kvlm_kv_tier_errors_total{model_name="llama",tier="redis"})"), 0);
  // Hits come back: once the breaker lets writes through again, a prompt the
  // reader computes is a hit for a third server.
  test::ServerProcess third(server_args({"--kv-redis", redis.url(), "--ctx", "1024"}));
  bool hit = false;
  for (int attempt = 0; attempt < 40 && !hit; ++attempt) {
    const std::string p = long_prompt(6).substr(0, 1200 - static_cast<size_t>(attempt));  // a new prompt each try
    ASSERT_EQ(complete(reader, p).status, 200);
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    const Answer t = complete(third, p);
    ASSERT_EQ(t.status, 200);
    hit = t.cached > 0;
  }
  EXPECT_TRUE(hit) << "hits came back after Redis restarted";
}

}  // namespace kvlm::kv_tier_server_test
