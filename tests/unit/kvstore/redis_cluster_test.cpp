// The Redis tier on a 3-node Redis Cluster the test creates on loopback:
// key slots equal the server's CLUSTER KEYSLOT, a chain's keys spread over
// every node, a resharded slot's MOVED replies are followed and the map is
// refreshed, and a dead node costs only the keys it owns.
#include <chrono>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "kvstore/redis_store.h"
#include "kvstore_test_util.h"
#include "redis_server.h"

namespace kvlm {
namespace {

const Hash128 kClusterNs{0x9090, 0x1212};

std::unique_ptr<RedisStore> open_cluster_store(const std::string& url) {
  RedisStoreConfig c;
  c.url = url;
  c.ns = kClusterNs;
  c.link.backoff_min_s = 0.05;
  c.link.backoff_max_s = 0.2;
  return RedisStore::open(c);
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

TEST(RedisKeySlot, Crc16AndHashTags) {
  EXPECT_EQ(crc16_xmodem("123456789"), 0x31C3);  // the XMODEM check value
  EXPECT_EQ(redis_key_slot("foo"), 12182);
  EXPECT_EQ(redis_key_slot("bar"), 5061);
  EXPECT_EQ(redis_key_slot("{user1000}.following"), redis_key_slot("user1000"));
  EXPECT_EQ(redis_key_slot("{user1000}.followers"), redis_key_slot("{user1000}.following"));
  EXPECT_EQ(redis_key_slot("foo{}{bar}"), crc16_xmodem("foo{}{bar}") % 16384);  // empty tag: whole key
  EXPECT_EQ(redis_key_slot("foo{{bar}}zap"), redis_key_slot("{bar"));
}

TEST(RedisClusterStore, KeysSpreadOverNodesAndMovedIsFollowed) {
  test::RedisCluster cluster;
  ASSERT_FALSE(HasFailure());
  auto s = open_cluster_store(cluster.url());
  // Our slot function agrees with the server's for real keys.
  auto chain = test::make_chain(120, 7, 256);
  for (int i = 0; i < 20; ++i) {
    const std::string key = s->key(chain[static_cast<size_t>(i)].hash);
    EXPECT_EQ(std::to_string(redis_key_slot(key)) + "\n", cluster.node(0).cli({"CLUSTER", "KEYSLOT", key}));
  }
  auto hashes = test::hashes_of(chain);
  EXPECT_EQ(s->store(chain), 120u);
  int64_t total = 0;
  for (int i = 0; i < cluster.num_nodes(); ++i) {
    const int64_t n = std::stoll(cluster.node(i).cli({"DBSIZE"}));
    EXPECT_GT(n, 10) << "node " << i;
    total += n;
  }
  EXPECT_EQ(total, 120);
  EXPECT_EQ(s->probe(hashes), 120u);
  EXPECT_EQ(s->load(hashes).size(), 120u);
  EXPECT_EQ(s->num_redirects(), 0);

  // Move 3000 slots (and their keys) from node 0 to node 1 behind the
  // store's back: its map is now stale for those slots.
  const std::string from = trim(cluster.node(0).cli({"CLUSTER", "MYID"}));
  const std::string to = trim(cluster.node(1).cli({"CLUSTER", "MYID"}));
  auto r = test::run_program({"redis-cli", "--cluster", "reshard", cluster.node(0).endpoint(), "--cluster-from", from,
                              "--cluster-to", to, "--cluster-slots", "3000", "--cluster-yes"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto got = s->load(hashes);
  EXPECT_EQ(got.size(), 120u);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].payload, chain[i].payload);
  const int64_t num_redirects = s->num_redirects();
  EXPECT_GT(num_redirects, 0);
  // The map was refreshed after the MOVED replies: no more redirects.
  EXPECT_EQ(s->load(hashes).size(), 120u);
  EXPECT_EQ(s->num_redirects(), num_redirects);

  // A dead node: its keys are misses (the hit ends at the first), others stay.
  cluster.node(2).kill();
  size_t n = 0;
  EXPECT_NO_THROW(n = s->load(hashes).size());
  EXPECT_LT(n, 120u);
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(s->load(std::vector<BlockHash>{hashes[i]}).size(), 1u);
}

TEST(RedisClusterStore, AskDuringMigrationIsFollowedWithoutChangingTheMap) {
  test::RedisCluster cluster;
  ASSERT_FALSE(HasFailure());
  auto s = open_cluster_store(cluster.url());
  auto chain = test::make_chain(40, 8, 128);
  ASSERT_EQ(s->store(std::span(chain).subspan(0, 1)), 1u);  // loads the slot map
  // A block whose slot node 0 owns, not yet written anywhere.
  size_t pick = 1;
  int32_t slot = -1;
  for (; pick < chain.size(); ++pick) {
    slot = redis_key_slot(s->key(chain[pick].hash));
    // A read on node 0 without MOVED means node 0 owns the slot.
    if (cluster.node(0).cli({"GET", s->key(chain[pick].hash)}).find("MOVED") == std::string::npos) break;
  }
  ASSERT_LT(pick, chain.size());
  const std::string id0 = trim(cluster.node(0).cli({"CLUSTER", "MYID"}));
  const std::string id1 = trim(cluster.node(1).cli({"CLUSTER", "MYID"}));
  const std::string slot_s = std::to_string(slot);
  ASSERT_EQ(cluster.node(1).cli({"CLUSTER", "SETSLOT", slot_s, "IMPORTING", id0}), "OK\n");
  ASSERT_EQ(cluster.node(0).cli({"CLUSTER", "SETSLOT", slot_s, "MIGRATING", id1}), "OK\n");
  // Node 0 lacks the key and the slot is migrating: -ASK to node 1.
  const int64_t before = s->num_redirects();
  EXPECT_EQ(s->store(std::span(chain).subspan(pick, 1)), 1u);
  EXPECT_EQ(s->num_redirects(), before + 1);
  EXPECT_EQ(cluster.node(1).cli({"CLUSTER", "COUNTKEYSINSLOT", slot_s}), "1\n");
  EXPECT_EQ(s->load(std::vector<BlockHash>{chain[pick].hash}).size(), 1u);
  EXPECT_EQ(s->num_redirects(), before + 2);
}

}  // namespace
}  // namespace kvlm
