// --metrics-compat: vLLM's and SGLang's names for the queue, the running
// batch and the KV cache, the values kvlm's own names give in the same
// scrape, read while an overload burst keeps requests waiting (what llm-d's
// endpoint picker and the engines' routers score workers by).
#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace kvlm::metrics_compat_test {

using Json = nlohmann::json;

// The value of `name`'s series in `text` (the first one, any labels).
double sample(const std::string& text, const std::string& name) {
  std::smatch m;
  const std::regex re("\n" + name + R"(\{[^}]*\} ([-0-9.e+]+))");
  if (!std::regex_search(text, m, re)) return -1;
  return std::stod(m[1]);
}

TEST(MetricsCompat, VllmAndSglangNamesGiveKvlmsValuesUnderABurst) {
  test::ServerProcess server({"-m", test::shared_path("models/synth-tiny-F32.gguf"), "-t", "1", "--max-seqs", "2",
                              "--metrics-compat", "vllm", "--metrics-compat", "sglang", "--served-model-name", "tiny"});
  std::vector<std::thread> burst = test::completion_burst(server, 6, 48);
  // Scrape until the burst has requests waiting: two run, the rest queue.
  std::string text;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    text = test::metrics_text(server);
    if (sample(text, "kvlm_requests_waiting") > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const double waiting = sample(text, "kvlm_requests_waiting");
  ASSERT_GT(waiting, 0) << "no scrape saw a request waiting\n" << text.substr(0, 2000);
  EXPECT_EQ(sample(text, "vllm:num_requests_waiting"), waiting);
  EXPECT_EQ(sample(text, "sglang:num_queue_reqs"), waiting);
  const double running = sample(text, "kvlm_requests_running");
  EXPECT_EQ(sample(text, "vllm:num_requests_running"), running);
  EXPECT_EQ(sample(text, "sglang:num_running_reqs"), running);
  const double usage = sample(text, "kvlm_kv_usage_ratio");
  EXPECT_GE(usage, 0.0);
  EXPECT_LE(usage, 1.0);
  EXPECT_EQ(sample(text, "vllm:kv_cache_usage_perc"), usage);
  EXPECT_EQ(sample(text, "vllm:gpu_cache_usage_perc"), usage);
  EXPECT_EQ(sample(text, "sglang:token_usage"), usage);
  // The cache's shape as vLLM labels it, equal to kvlm's gauges.
  std::smatch info;
  const std::regex cache_info(R"re(\nvllm:cache_config_info\{block_size="(\d+)",num_gpu_blocks="(\d+)",model_name="tiny"\} 1)re");
  ASSERT_TRUE(std::regex_search(text, info, cache_info))
      << text.substr(0, 2000);
  EXPECT_EQ(std::stod(info[1]), sample(text, "kvlm_kv_block_size_tokens"));
  EXPECT_EQ(std::stod(info[2]), sample(text, "kvlm_kv_blocks_capacity"));
  EXPECT_NE(text.find("vllm:num_requests_waiting{model_name=\"tiny\"}"), std::string::npos);
  for (std::thread& t : burst) t.join();
  // After the burst, the counters agree too.
  const std::string after = test::metrics_text(server);
  EXPECT_EQ(sample(after, "vllm:generation_tokens_total"), sample(after, "kvlm_generation_tokens_total"));
  EXPECT_EQ(sample(after, "vllm:generation_tokens_total"), 6 * 48);
  EXPECT_EQ(sample(after, "vllm:num_requests_waiting"), 0);
}

// Without the flag, /metrics has kvlm's names only.
TEST(MetricsCompat, NoOtherNamesWithoutTheFlag) {
  test::ServerProcess server({"-m", test::shared_path("models/stories260K.gguf"), "-t", "1"});
  const std::string text = test::metrics_text(server);
  ASSERT_NE(text.find("kvlm_requests_waiting"), std::string::npos) << text.substr(0, 500);
  EXPECT_EQ(text.find("vllm:"), std::string::npos);
  EXPECT_EQ(text.find("sglang:"), std::string::npos);
}

}  // namespace kvlm::metrics_compat_test
