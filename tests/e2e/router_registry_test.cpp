// Fleet membership through a real Redis (and a Redis Cluster): workers that
// register are routed to without a router restart; one that stops cleanly
// leaves at once, one that is killed leaves when its key expires, and a new
// one joins; a router with a static list and a registry keeps its static
// members.
#include <gtest/gtest.h>

#include <csignal>
#include <set>
#include <thread>

#include "e2e/router_fleet.h"
#include "unit/kvstore/redis_server.h"

namespace kvlm::router_registry_test {

using test::Fleet;
using test::Json;

std::vector<std::string> worker_args(const std::string& registry) {
  return {"-m", Fleet::model(), "-t", "1", "--kv-events", "--register", registry, "--register-ttl-ms", "600",
          "--registry-name", "test-fleet"};
}

// The URLs the router lists as members, once they equal `want` (or after 10 s).
std::set<std::string> members(int router_port, const std::set<std::string>& want) {
  std::set<std::string> got;
  for (int i = 0; i < 500; ++i) {
    got.clear();
    const Json status = test::http_get(router_port, "/v1/status").json();
    if (status.is_object())
      for (const Json& w : status["workers"]) got.insert(w["url"].get<std::string>());
    if (got == want) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return got;
}

std::string url_of(const test::ServerProcess& s) { return s.url(); }

void expect_served(int router_port) {
  const test::HttpAnswer a =
      test::http_post(router_port, "/v1/completions", {{"prompt", "Once"}, {"max_tokens", 4}, {"temperature", 0}});
  EXPECT_EQ(a.status, 200) << a.body;
}

void membership_follows_the_registry(const std::string& registry) {
  test::ServerProcess router({"-m", Fleet::model(), "--registry", registry, "--registry-name", "test-fleet",
                              "--registry-poll-ms", "100", "--health-interval-ms", "200"},
                             "router");
  EXPECT_EQ(test::http_get(router.port(), "/health").status, 503) << "no member yet";
  auto a = std::make_unique<test::ServerProcess>(worker_args(registry));
  auto b = std::make_unique<test::ServerProcess>(worker_args(registry));
  EXPECT_EQ(members(router.port(), {url_of(*a), url_of(*b)}), (std::set<std::string>{url_of(*a), url_of(*b)}));
  expect_served(router.port());
  // A clean stop deletes its key: it leaves at the router's next look.
  const std::string a_url = url_of(*a);
  a->stop();
  EXPECT_EQ(members(router.port(), {url_of(*b)}), std::set<std::string>{url_of(*b)}) << a_url << " still listed";
  // A killed one leaves when its key expires.
  b->send_signal(SIGKILL);
  b->wait();
  EXPECT_TRUE(members(router.port(), {}).empty());
  // A new one joins and is served.
  test::ServerProcess c(worker_args(registry));
  EXPECT_EQ(members(router.port(), {url_of(c)}), std::set<std::string>{url_of(c)});
  expect_served(router.port());
}

TEST(RouterRegistry, MembershipFollowsARedis) {
  test::RedisServer redis;
  membership_follows_the_registry(redis.url());
}

TEST(RouterRegistry, MembershipFollowsARedisCluster) {
  test::RedisCluster cluster;
  membership_follows_the_registry(cluster.url());
}

TEST(RouterRegistry, StaticMembersStayWhateverTheRegistrySays) {
  test::RedisServer redis;
  test::ServerProcess fixed({"-m", Fleet::model(), "-t", "1"});
  test::ServerProcess router({"-m", Fleet::model(), "--workers", fixed.url(), "--registry", redis.url(),
                              "--registry-name", "test-fleet", "--registry-poll-ms", "100"},
                             "router");
  test::ServerProcess joined(worker_args(redis.url()));
  EXPECT_EQ(members(router.port(), {fixed.url(), joined.url()}), (std::set<std::string>{fixed.url(), joined.url()}));
  joined.stop();
  EXPECT_EQ(members(router.port(), {fixed.url()}), std::set<std::string>{fixed.url()});
  redis.kill();  // Redis gone: the router keeps what it has
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(members(router.port(), {fixed.url()}), std::set<std::string>{fixed.url()});
  expect_served(router.port());
}

}  // namespace kvlm::router_registry_test
