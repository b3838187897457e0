// kvlm router with workers serving LoRA adapters: the workers say which
// adapters they serve (and each one's identity) in their KV-event load
// lines, so the router hashes an adapter request's blocks as the workers do
// and predicts its cached tokens exactly, and never predicts an adapter's
// blocks for the base.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "router_fleet.h"
#include "support/test_support.h"

namespace kvlm::router_lora_test {

using test::Json;

class RouterLora : public ::testing::Test {
 public:
  static void SetUpTestSuite() {
    adapter_ = new std::string(test::temp_dir() + "/alpha.gguf");
    const test::CommandResult r = test::run_kvlm({"make-lora", "-m", test::Fleet::model(), "-o", *adapter_,
                                                  "--format", "gguf", "--rank", "4", "--targets", "all"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    fleet_ = new test::Fleet({.num_workers = 2, .worker_args = {"--lora", "alpha=" + *adapter_}});
  }
  static void TearDownTestSuite() {
    delete fleet_;
    delete adapter_;
  }
  static test::Fleet* fleet_;
  static std::string* adapter_;
};
test::Fleet* RouterLora::fleet_ = nullptr;
std::string* RouterLora::adapter_ = nullptr;

// Until the router has heard every worker name its adapters (or 10 s).
bool wait_for_adapters(int router_port) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    const Json status = test::http_get(router_port, "/v1/status").json();
    bool all = status.contains("workers") && !status["workers"].empty();
    for (const Json& w : status.value("workers", Json::array())) all = all && w["loras"] == Json::array({"alpha"});
    if (all) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

TEST_F(RouterLora, AnAdaptersPromptGoesBackToItsBlocksAndTheBaseIsNotPromisedThem) {
  ASSERT_TRUE(wait_for_adapters(fleet_->router_port())) << test::http_get(fleet_->router_port(), "/v1/status").body;
  const std::string story = test::read_file(test::shared_path("text/tinystories_sample.txt")).substr(6000, 900);
  const Json body = {{"model", "alpha"}, {"prompt", story}, {"max_tokens", 4}, {"temperature", 0}};
  const Json first = test::http_post(fleet_->router_port(), "/v1/completions", body).json();
  ASSERT_TRUE(first.contains("usage")) << first.dump();
  const int prompt_tokens = first["usage"]["prompt_tokens"];
  Json second;
  for (int i = 0; i < 50; ++i) {
    second = test::http_post(fleet_->router_port(), "/v1/completions", body).json();
    if (second["usage"]["prompt_tokens_details"]["cached_tokens"] > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(second["usage"]["prompt_tokens_details"]["cached_tokens"], (prompt_tokens - 1) / 16 * 16);
  // The base's request of the same prompt finds none of the adapter's blocks.
  Json base_body = body;
  base_body.erase("model");
  const Json base = test::http_post(fleet_->router_port(), "/v1/completions", base_body).json();
  EXPECT_EQ(base["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  const std::string metrics = test::metrics_text(fleet_->router());
  EXPECT_GT(test::metric_sample(metrics, "kvlm_router_reported_cached_tokens_total"), 0);
  EXPECT_EQ(test::metric_sample(metrics, "kvlm_router_predicted_cached_tokens_total"),
            test::metric_sample(metrics, "kvlm_router_reported_cached_tokens_total"))
      << "the router predicted other cached tokens than the workers reported";
}

}  // namespace kvlm::router_lora_test
