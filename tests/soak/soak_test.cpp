// The soak and fault test: 64 concurrent clients on loopback against a real
// `kvlm serve` with a tiny KV pool (preemption), a queue cap (503s), faults
// injected into some requests (KVLM_FAULT), a fifth of the clients hanging
// up at random points, cancelled streams, slow readers that never read, and
// prompts that hit and miss the prefix cache. Afterwards: no block held, no
// request running, RSS within 10% of where it settled, and every completed
// response well formed.
//
// KVLM_SOAK_REQUESTS sets the number of requests (default 256: a few seconds
// in ctest); scripts/soak.sh runs a long one.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <thread>

#include <fmt/format.h>
#include <httplib.h>

#include "soak/soak_client.h"
#include "support/raw_socket.h"
#include "support/test_support.h"

namespace kvlm {
namespace {

int64_t env_int(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoll(v) : fallback;
}

// The server's resident memory in bytes, from /metrics (-1 if unknown).
int64_t rss_bytes(const test::ServerProcess& server) {
  return static_cast<int64_t>(test::server_metric(server, "process_resident_memory_bytes"));
}

// Streams whose clients never read a byte, held open until the soak ends:
// with a 1 KiB receive buffer the server's writes stall after a few events.
std::vector<int> start_slow_readers(int port, int n) {
  std::vector<int> fds;
  for (int i = 0; i < n; ++i) {
    const int fd = test::connect_socket(port, 1024);
    const std::string body = fmt::format(
        R"({{"prompt":"Once upon a time","max_tokens":200,"ignore_eos":true,"stream":true}})");
    if (fd >= 0 && test::send_all(fd, test::raw_post("/v1/completions", body))) fds.push_back(fd);
  }
  return fds;
}

bool wait_idle(const test::ServerProcess& server, std::string& last_metrics) {
  for (int i = 0; i < 3000; ++i) {  // up to 30 s
    last_metrics = test::metrics_text(server);
    if (test::metric_sample(last_metrics, "kvlm_kv_blocks_used") == 0 &&
        test::metric_sample(last_metrics, "kvlm_requests_running") == 0 &&
        test::metric_sample(last_metrics, "kvlm_requests_waiting") == 0)
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST(Soak, ManyClientsUnderFaults) {
  const int64_t num_requests = env_int("KVLM_SOAK_REQUESTS", 256);
  const int num_clients = static_cast<int>(env_int("KVLM_SOAK_CLIENTS", 64));
  const auto seed = static_cast<uint32_t>(env_int("KVLM_SOAK_SEED", 1));
  // Every 53rd request fails at its second token.
  ::setenv("KVLM_FAULT", "kind=error,every=53,at=1", 1);
  // 48 blocks of 16 for 16 running sequences of up to ~140 tokens: preemption.
  test::ServerProcess server({"-m", test::shared_path("models/stories260K.gguf"), "-t", "1", "--ctx", "768",
                              "--max-model-len", "256", "--max-seqs", "16", "--max-queued-requests", "32",
                              "--request-timeout", "120"});
  ::unsetenv("KVLM_FAULT");
  ASSERT_GT(server.port(), 0);
  const int64_t rss_start = rss_bytes(server);
  const std::vector<int> slow = start_slow_readers(server.port(), 2);

  soak::Tally tally;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> rss_settled{-1};
  const int64_t settle_at = num_requests / 2;  // RSS is taken once half have run
  std::vector<std::thread> clients;
  for (int c = 0; c < num_clients; ++c) {
    clients.emplace_back([&, c] {
      std::mt19937 rng(seed * 1000 + static_cast<uint32_t>(c));
      for (int64_t i = next++; i < num_requests; i = next++) {
        if (i == settle_at) rss_settled = rss_bytes(server);
        tally.add(soak::run_one(server.port(), rng));
      }
    });
  }
  for (auto& t : clients) t.join();
  for (int fd : slow) test::close_socket(fd);

  std::string metrics;
  const bool idle = wait_idle(server, metrics);
  const int64_t rss_after = rss_bytes(server);
  const double blocks_after = test::metric_sample(metrics, "kvlm_kv_blocks_used");
  const std::string summary = fmt::format(
      "soak: {} requests from {} clients: {}\n"
      "soak: after: blocks held {}, running {}, waiting {}; preemptions {}, prefix hits {} tokens, "
      "failed {}, timed out {}\n"
      "soak: RSS at start {:.1f} MiB, settled {:.1f} MiB (after {} requests), after {:.1f} MiB\n",
      tally.total(), num_clients, tally.summary(), blocks_after, test::metric_sample(metrics, "kvlm_requests_running"),
      test::metric_sample(metrics, "kvlm_requests_waiting"), test::metric_sample(metrics, "kvlm_preemptions_total"),
      test::metric_sample(metrics, "kvlm_prefix_cache_hits_total"),
      test::metric_sample(metrics, "kvlm_requests_failed_total"),
      test::metric_sample(metrics, "kvlm_requests_timed_out_total"), rss_start / 1048576.0,
      rss_settled.load() / 1048576.0, settle_at, rss_after / 1048576.0);
  std::fputs(summary.c_str(), stdout);
  std::fflush(stdout);

  EXPECT_EQ(tally.total(), num_requests);
  EXPECT_TRUE(idle) << "requests or blocks left:\n" << metrics;
  EXPECT_EQ(blocks_after, 0);
  for (const std::string& s : tally.unexpected_samples()) ADD_FAILURE() << "unexpected outcome: " << s;
  EXPECT_GT(tally.count("ok"), num_requests / 2) << summary;
  // The conditions the soak is for were actually reached.
  EXPECT_GT(tally.count("hangup"), 0) << summary;
  EXPECT_GT(test::metric_sample(metrics, "kvlm_preemptions_total"), 0) << summary;
  EXPECT_GT(test::metric_sample(metrics, "kvlm_prefix_cache_hits_total"), 0) << summary;
  if (num_requests >= 106) { EXPECT_GT(tally.count("fault"), 0) << summary; }
  ASSERT_GT(rss_settled.load(), 0);
  EXPECT_LE(static_cast<double>(rss_after), 1.10 * static_cast<double>(rss_settled.load())) << summary;

  httplib::Client cli("127.0.0.1", server.port());
  auto health = cli.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  const auto stopped = server.stop();
  EXPECT_EQ(stopped.exit_code, 0);
  // The server's log (hang-ups, injected faults, errors) when anything went wrong.
  if (::testing::Test::HasFailure()) std::fputs(stopped.err.substr(stopped.err.size() > 8000 ? stopped.err.size() - 8000 : 0).c_str(), stderr);
}

}  // namespace
}  // namespace kvlm
