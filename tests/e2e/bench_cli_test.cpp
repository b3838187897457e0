// `kvlm bench` through the real binary: the JSON reports carry every key the
// issues and the README promise (speeds are measured, never asserted).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace kvlm {
namespace {

TEST(BenchCli, BatchReportsThroughputLatencyAndCache) {
  auto r = test::run_kvlm({"bench", "batch", "-m", test::shared_path("models/stories260K.gguf"), "--requests", "6",
                           "--concurrency", "3", "--prompt-len", "40", "--gen-len", "8", "--shared-prefix", "32",
                           "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"requests", "concurrency", "prompt_tokens_per_s", "generated_tokens_per_s", "ttft_ms",
                          "itl_ms", "prefix_hit_rate", "peak_kv_blocks", "preemptions"})
    EXPECT_TRUE(j.contains(key)) << key << " missing from " << r.out;
  for (const char* key : {"ttft_ms", "itl_ms"})
    for (const char* stat : {"mean", "p50", "p99"}) EXPECT_TRUE(j[key].contains(stat)) << key << "." << stat;
  EXPECT_EQ(j["requests"], 6);
  EXPECT_GT(j["generated_tokens_per_s"].get<double>(), 0);
  // 32 shared tokens = 2 full blocks; requests after the first hit them.
  EXPECT_GT(j["prefix_hit_rate"].get<double>(), 0.0);
  EXPECT_GT(j["peak_kv_blocks"].get<int>(), 0);
}

TEST(BenchCli, ModelReportsPromptAndGenerationSpeed) {
  auto r = test::run_kvlm({"bench", "model", "-m", test::shared_path("models/stories260K.gguf"), "-p", "32", "-n",
                           "8", "-r", "1", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["pp"]["tokens_per_s"].get<double>(), 0);
  EXPECT_GT(j["tg"]["tokens_per_s"].get<double>(), 0);
  EXPECT_EQ(j["params"], 292800);  // every tensor element of stories260K.gguf
  r = test::run_kvlm({"bench", "nothing"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("unknown benchmark 'nothing'"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvlm
