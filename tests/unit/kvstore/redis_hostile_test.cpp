// The Redis tier against a scripted misbehaving Redis (fake_redis.h): replies
// a byte at a time, slow GETs, huge array and string headers, error replies,
// a connection reset between calls, MOVED loops, slow MOVED, MOVED to
// hundreds of ports outside the topology, and a topology of many nodes.
// Every lookup ends by its deadline, a huge header is refused before it is
// read, no socket opens outside the topology or past the cap, and the read
// and write breakers judge separately.
#include <chrono>
#include <filesystem>
#include <thread>

#include <unistd.h>

#include <gtest/gtest.h>

#include "kvstore/redis_store.h"
#include "fake_redis.h"
#include "kvstore_test_util.h"

namespace kvlm {
namespace {

using namespace std::chrono_literals;
using Mode = test::FakeRedis::Mode;
const Hash128 kHostileNs{0x7777, 0x8888};

// Timing bounds below leave half a second or more of margin over the
// deadline they check: a loaded 2-core CI machine stalls threads for that long.
std::unique_ptr<RedisStore> open_store(const std::string& url, double backoff_s = 0.15) {
  RedisStoreConfig c;
  c.url = url;
  c.ns = kHostileNs;
  c.ttl_s = 60;
  c.payload_bytes = 512;
  c.link.command_timeout_s = 0.3;
  c.link.backoff_min_s = backoff_s;
  c.link.backoff_max_s = backoff_s;
  return RedisStore::open(c);
}

template <typename F>
double seconds_of(F f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int64_t refused(const RedisStore& s, TierRefusal why) { return s.stats().num_refused[static_cast<size_t>(why)]; }

int64_t resident_bytes() {
  long pages = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr || std::fscanf(f, "%ld %ld", &pages, &resident) != 2) ADD_FAILURE() << "no /proc/self/statm";
  if (f != nullptr) std::fclose(f);
  return resident * ::sysconf(_SC_PAGESIZE);
}

size_t open_descriptors() {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) n += e.exists() ? 1 : 0;
  return n;
}

TEST(RedisHostile, ByteAtATimeRepliesEndAtTheDeadline) {
  test::FakeRedis fake(Mode::kNormal);
  auto s = open_store(fake.url());
  auto chain = test::make_chain(4, 1);
  ASSERT_EQ(s->store(chain), 4u);
  fake.set_mode(Mode::kByteAtATime, 0.005);  // a 600-byte record takes 3 s
  std::vector<KvRecord> got;
  const double t = seconds_of([&] { got = s->load(test::hashes_of(chain), Deadline::in(0.1)); });
  EXPECT_TRUE(got.empty());
  EXPECT_LT(t, 0.1 + 0.6);
  EXPECT_EQ(refused(*s, TierRefusal::kTimeout), 1);
}

TEST(RedisHostile, SlowGetsCostOneDeadlineAndTheReadBreakerIsTheirsAlone) {
  test::FakeRedis fake(Mode::kNormal);
  auto s = open_store(fake.url(), /*backoff_s=*/1.5);
  auto chain = test::make_chain(4, 2), more = test::make_chain(2, 3);
  ASSERT_EQ(s->store(chain), 4u);
  fake.set_mode(Mode::kSlowGet, 5.0);
  EXPECT_LT(seconds_of([&] { EXPECT_TRUE(s->load(test::hashes_of(chain), Deadline::in(0.1)).empty()); }), 0.1 + 0.6);
  EXPECT_EQ(refused(*s, TierRefusal::kTimeout), 1);
  // The read breaker is open: the next lookup sends nothing.
  const int num_gets = fake.num_gets();
  EXPECT_TRUE(s->load(test::hashes_of(chain), Deadline::in(0.1)).empty());
  // Writes are judged apart: they go on, and their success leaves the read breaker open.
  EXPECT_EQ(s->store(more), 2u);
  EXPECT_TRUE(s->load(test::hashes_of(chain), Deadline::in(0.1)).empty());
  EXPECT_EQ(fake.num_gets(), num_gets) << "a lookup went out while the read breaker was open";
  fake.set_mode(Mode::kNormal);
  std::this_thread::sleep_for(1600ms);  // past the backoff
  EXPECT_EQ(s->load(test::hashes_of(chain), Deadline::in(2.0)).size(), 4u);
}

TEST(RedisHostile, HugeReplyHeadersAreRefusedAtOnceWithoutAllocating) {
  for (Mode mode : {Mode::kHugeArray, Mode::kHugeBulk}) {
    test::FakeRedis fake(Mode::kNormal);
    auto s = open_store(fake.url());
    auto chain = test::make_chain(2, 4);
    ASSERT_EQ(s->store(chain), 2u);
    fake.set_mode(mode);
    const int64_t before = resident_bytes();
    const double t = seconds_of([&] { EXPECT_TRUE(s->load(test::hashes_of(chain), Deadline::in(3.0)).empty()); });
    EXPECT_LT(t, 1.5) << "refused at the header, not at the deadline";
    EXPECT_LT(resident_bytes() - before, 8 << 20);
    EXPECT_EQ(refused(*s, TierRefusal::kOversize), 1);
  }
}

TEST(RedisHostile, ErrorRepliesMakeTheTierDownUntilACommandSucceeds) {
  test::FakeRedis fake(Mode::kErrors);
  auto s = open_store(fake.url());
  auto chain = test::make_chain(2, 5);
  EXPECT_EQ(s->store(chain), 0u);
  EXPECT_FALSE(s->stats().up);
  EXPECT_TRUE(s->load(test::hashes_of(chain)).empty());
  EXPECT_FALSE(s->stats().up);
  fake.set_mode(Mode::kNormal);
  EXPECT_EQ(s->store(chain), 2u);
  EXPECT_TRUE(s->stats().up);
}

TEST(RedisHostile, AConnectionResetBetweenCallsIsRetriedOnce) {
  test::FakeRedis fake(Mode::kResetOnReuse);
  auto s = open_store(fake.url());
  auto chain = test::make_chain(3, 6);
  ASSERT_EQ(s->store(chain), 3u);  // the first connection's first read: answered
  // The server drops that connection when it is used again: one reconnect,
  // the GETs resent, and the lookup hits.
  EXPECT_EQ(s->load(test::hashes_of(chain)).size(), 3u);
  EXPECT_EQ(fake.num_accepted(), 2);
  EXPECT_TRUE(s->stats().up);
  EXPECT_EQ(s->stats().num_errors, 0);
}

TEST(RedisHostileCluster, MovedOutsideTheTopologyOpensNoConnection) {
  test::FakeRedis fake(Mode::kNormal, 0, /*num_extra_ports=*/300);
  auto s = open_store(fake.cluster_url());
  auto chain = test::make_chain(4, 7);
  ASSERT_EQ(s->store(chain), 4u);
  fake.set_mode(Mode::kMovedElsewhere);
  const size_t fds = open_descriptors();
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(s->load(test::hashes_of(chain), Deadline::in(0.2)).empty());
  EXPECT_EQ(fake.num_accepted_extra(), 0) << "a redirect outside CLUSTER SLOTS must not connect";
  EXPECT_LE(open_descriptors(), fds + 1);
  EXPECT_GT(s->stats().num_errors, 0);
}

TEST(RedisHostileCluster, MovedLoopsAndSlowMovedEndByTheDeadline) {
  test::FakeRedis fake(Mode::kNormal);
  auto s = open_store(fake.cluster_url());
  auto chain = test::make_chain(4, 8);
  ASSERT_EQ(s->store(chain), 4u);
  fake.set_mode(Mode::kMovedLoop);
  // Three hops and the loop is given up, well before the deadline.
  EXPECT_LT(seconds_of([&] { EXPECT_TRUE(s->load(test::hashes_of(chain), Deadline::in(2.0)).empty()); }), 1.5);
  fake.set_mode(Mode::kSlowMoved, 0.5);  // four replies: 2 s without a deadline
  std::this_thread::sleep_for(200ms);  // past a breaker the loop may have opened
  EXPECT_LT(seconds_of([&] { EXPECT_TRUE(s->load(test::hashes_of(chain), Deadline::in(0.1)).empty()); }), 0.1 + 0.6);
  fake.set_mode(Mode::kNormal);
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(s->load(test::hashes_of(chain), Deadline::in(1.0)).size(), 4u);
}

TEST(RedisHostileCluster, ConnectionsStayUnderTheCapAndClosedOnesAreReaped) {
  test::FakeRedis fake(Mode::kManyNodes, 0, /*num_extra_ports=*/40);
  RedisLinkOptions options;
  options.max_cluster_connections = 8;
  ClusterRedisRouter router({RedisEndpoint{"127.0.0.1", fake.port()}}, options);
  std::vector<RedisCommand> sets;
  for (int i = 0; i < 300; ++i) sets.push_back({"SET", "key" + std::to_string(i), "v"});
  auto replies = router.execute(sets);  // 41 nodes in one call: only 8 sockets
  const auto num_ok = std::count_if(replies.begin(), replies.end(), [](const auto& r) { return r.has_value(); });
  EXPECT_GT(num_ok, 0);
  EXPECT_LT(num_ok, 300);
  EXPECT_LE(router.num_open_connections(), 8u);
  for (const auto& cmd : sets) {  // one node per call: every command gets through
    auto r = router.execute(std::span(&cmd, 1));
    EXPECT_TRUE(r[0].has_value());
    ASSERT_LE(router.num_open_connections(), 8u);
  }
  fake.close_clients();
  for (int i = 0; i < 200 && fake.num_open() > 0; ++i) std::this_thread::sleep_for(5ms);
  router.execute(std::span(&sets[0], 1));
  EXPECT_EQ(router.num_open_connections(), 1u) << "sockets the server closed are reaped, not left in CLOSE_WAIT";
}

}  // namespace
}  // namespace kvlm
