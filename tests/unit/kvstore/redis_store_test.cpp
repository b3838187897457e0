// The Redis tier against a real redis-server this test starts on a free
// loopback port: round trip with NX and TTL, a server killed mid-way (misses,
// no exceptions, `up` false) and restarted (hits again), noeviction OOM
// errors as dropped writes, a password file, and a record that does not
// decode refused.
#include <chrono>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "common/error.h"
#include "kvstore/redis_store.h"
#include "kvstore_test_util.h"
#include "redis_server.h"

namespace kvlm {
namespace {

const Hash128 kRedisNs{0x5151, 0x7272};

std::unique_ptr<RedisStore> open_redis_store(const std::string& url, const std::string& password_file = "",
                                       int64_t ttl_s = 600) {
  RedisStoreConfig c;
  c.url = url;
  c.password_file = password_file;
  c.ttl_s = ttl_s;
  c.ns = kRedisNs;
  c.link.backoff_min_s = 0.05;
  c.link.backoff_max_s = 0.2;
  return RedisStore::open(c);
}

TEST(RedisStore, RoundTripWithNxAndTtl) {
  test::RedisServer server;
  ASSERT_TRUE(server.running());
  auto s = open_redis_store(server.url());
  auto chain = test::make_chain(8, 1);
  auto hashes = test::hashes_of(chain);
  EXPECT_EQ(s->probe(hashes), 0u);
  EXPECT_TRUE(s->load(hashes).empty());
  EXPECT_EQ(s->store(std::span(chain).subspan(0, 6)), 6u);
  EXPECT_EQ(s->store(chain), 2u);  // NX: the first six are kept, not rewritten
  EXPECT_EQ(s->probe(hashes), 8u);
  auto got = s->load(hashes);
  ASSERT_EQ(got.size(), 8u);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].tokens, chain[i].tokens);
    EXPECT_EQ(got[i].payload, chain[i].payload);
  }
  const int ttl = std::stoi(server.cli({"TTL", s->key(hashes[0])}));
  EXPECT_GT(ttl, 590);
  EXPECT_LE(ttl, 600);
  // A key evicted mid-chain ends the hit there.
  server.cli({"DEL", s->key(hashes[3])});
  EXPECT_EQ(s->probe(hashes), 3u);
  EXPECT_EQ(s->load(hashes).size(), 3u);
  TierStats st = s->stats();
  EXPECT_TRUE(st.up);
  EXPECT_EQ(st.num_blocks_written, 8);
  EXPECT_EQ(st.num_hit_blocks, 11);
  EXPECT_EQ(st.num_errors, 0);
}

TEST(RedisStore, KilledServerIsAMissAndRestartedServerHitsAgain) {
  test::RedisServer server;
  ASSERT_TRUE(server.running());
  auto s = open_redis_store(server.url());
  auto chain = test::make_chain(4, 2);
  auto hashes = test::hashes_of(chain);
  ASSERT_EQ(s->store(chain), 4u);
  server.kill();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) {
    EXPECT_NO_THROW({
      EXPECT_TRUE(s->load(hashes).empty());
      EXPECT_EQ(s->probe(hashes), 0u);
      EXPECT_EQ(s->store(chain), 0u);
    });
  }
  // The breaker keeps a dead server cheap: 20 rounds well under the timeouts' sum.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
  TierStats down = s->stats();
  EXPECT_FALSE(down.up);
  EXPECT_GT(down.num_errors, 0);
  EXPECT_GT(down.num_blocks_dropped, 0);

  server.restart();  // empty: persistence is off
  ASSERT_TRUE(server.running());
  size_t num_stored = 0;
  for (int i = 0; i < 100 && num_stored == 0; ++i) {  // the breaker reopens within its backoff
    num_stored = s->store(chain);
    if (num_stored == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(num_stored, 4u);
  EXPECT_EQ(s->load(hashes).size(), 4u);
  EXPECT_TRUE(s->stats().up);
}

TEST(RedisStore, FrozenServerTimesOutAsAMissAndTheBreakerKeepsItCheap) {
  test::RedisServer server;
  ASSERT_TRUE(server.running());
  RedisStoreConfig c;
  c.url = server.url();
  c.ns = kRedisNs;
  c.link.command_timeout_s = 0.2;
  c.link.backoff_min_s = 0.5;
  c.link.backoff_max_s = 0.5;
  auto s = RedisStore::open(c);
  auto chain = test::make_chain(4, 6);
  auto hashes = test::hashes_of(chain);
  ASSERT_EQ(s->store(chain), 4u);
  server.freeze();
  auto t0 = std::chrono::steady_clock::now();
  std::thread io([&] { EXPECT_TRUE(s->load(hashes).empty()); });  // waits for the command timeout
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto ts = std::chrono::steady_clock::now();
  (void)s->stats();  // metrics never wait for the network
  EXPECT_LT(std::chrono::steady_clock::now() - ts, std::chrono::milliseconds(50));
  io.join();
  auto t1 = std::chrono::steady_clock::now();
  EXPECT_GE(t1 - t0, std::chrono::milliseconds(150));
  EXPECT_LT(t1 - t0, std::chrono::seconds(2));
  for (int i = 0; i < 50; ++i) EXPECT_TRUE(s->load(hashes).empty());  // breaker open: no wait
  EXPECT_LT(std::chrono::steady_clock::now() - t1, std::chrono::milliseconds(100));
  EXPECT_FALSE(s->stats().up);
  server.thaw();
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  EXPECT_EQ(s->load(hashes).size(), 4u);
  EXPECT_TRUE(s->stats().up);
}

TEST(RedisStore, NoevictionOutOfMemoryErrorsAreDroppedWrites) {
  test::RedisServer server({"--maxmemory", "1mb", "--maxmemory-policy", "noeviction"});
  ASSERT_TRUE(server.running());
  auto s = open_redis_store(server.url());
  auto chain = test::make_chain(256, 3, 8 * 1024);  // 2 MiB of records into 1 MiB
  size_t num_stored = 0;
  EXPECT_NO_THROW(num_stored = s->store(chain));
  EXPECT_GT(num_stored, 0u);
  EXPECT_LT(num_stored, chain.size());
  TierStats st = s->stats();
  EXPECT_EQ(st.num_blocks_dropped, static_cast<int64_t>(chain.size() - num_stored));
  EXPECT_GT(st.num_errors, 0);
  // What fit still loads, as a prefix.
  EXPECT_EQ(s->load(test::hashes_of(chain)).size(), num_stored);
}

TEST(RedisStore, PasswordFileAndDatabase) {
  test::RedisServer server({"--requirepass", "s3cret"});
  ASSERT_TRUE(server.running());
  const std::string pw = test::write_temp_file("redis-pw", "s3cret\n");
  auto s = open_redis_store(server.url() + "/2", pw);
  auto chain = test::make_chain(2, 4);
  EXPECT_EQ(s->store(chain), 2u);
  EXPECT_EQ(s->load(test::hashes_of(chain)).size(), 2u);
  EXPECT_EQ(server.cli({"-a", "s3cret", "--no-auth-warning", "-n", "2", "DBSIZE"}), "2\n");
  // Without the password every call is a miss, not an exception.
  auto anon = open_redis_store(server.url() + "/2");
  EXPECT_EQ(anon->load(test::hashes_of(chain)).size(), 0u);
  EXPECT_FALSE(anon->stats().up);
  EXPECT_THROW(open_redis_store(server.url(), "/nonexistent/pw"), Error);
}

TEST(RedisStore, RecordThatDoesNotDecodeIsRefused) {
  test::RedisServer server;
  ASSERT_TRUE(server.running());
  auto s = open_redis_store(server.url());
  auto chain = test::make_chain(3, 5);
  s->store(chain);
  // Another namespace's bytes under this block's key, and garbage.
  std::string foreign = encode_record(Hash128{1, 1}, chain[1]);
  server.cli({"SET", s->key(chain[1].hash), foreign});
  auto got = s->load(test::hashes_of(chain));
  EXPECT_EQ(got.size(), 1u);
  EXPECT_EQ(s->stats().num_corrupt, 1);
}

// Whatever a lookup refused is replaced by the next store of that block, not
// kept by NX: another client's list under our key, a foreign record.
TEST(RedisStore, RefusedValuesAreCountedByReasonAndOverwritten) {
  test::RedisServer server;
  ASSERT_TRUE(server.running());
  auto s = open_redis_store(server.url());
  auto chain = test::make_chain(3, 6);
  ASSERT_EQ(s->store(chain), 3u);
  server.cli({"DEL", s->key(chain[0].hash)});
  server.cli({"RPUSH", s->key(chain[0].hash), "not a record"});
  server.cli({"SET", s->key(chain[1].hash), encode_record(Hash128{1, 1}, chain[1])});
  EXPECT_TRUE(s->load(test::hashes_of(chain)).empty());
  const TierStats st = s->stats();
  EXPECT_EQ(st.num_refused[static_cast<size_t>(TierRefusal::kWrongType)], 1);
  // redis-cli cuts a value at its first NUL: the foreign record arrives truncated.
  EXPECT_EQ(st.num_refused[static_cast<size_t>(TierRefusal::kForeign)] +
                st.num_refused[static_cast<size_t>(TierRefusal::kCorrupt)], 1);
  EXPECT_EQ(st.num_hit_blocks, 0);
  EXPECT_EQ(s->store(chain), 2u);  // the two refused keys rewritten; the third kept by NX
  EXPECT_EQ(s->load(test::hashes_of(chain)).size(), 3u);
  EXPECT_TRUE(server.cli({"TYPE", s->key(chain[0].hash)}).starts_with("string"));
  EXPECT_GT(std::stoi(server.cli({"TTL", s->key(chain[1].hash)})), 0);
}

TEST(RedisStore, UrlsAreCheckedWithClearErrors) {
  EXPECT_THROW(open_redis_store("http://x:1"), Error);
  EXPECT_THROW(open_redis_store("redis://x:notaport"), Error);
  EXPECT_THROW(open_redis_store("redis://x:1/db"), Error);
  EXPECT_THROW(open_redis_store("redis://a:1,b:2"), Error);
  EXPECT_NO_THROW(open_redis_store("redis+cluster://a:1,b:2"));
  auto u = parse_redis_url("redis://127.0.0.1:7000/3");
  EXPECT_FALSE(u.cluster);
  EXPECT_EQ(u.endpoints[0].port, 7000);
  EXPECT_EQ(u.db, 3);
}

}  // namespace
}  // namespace kvlm
